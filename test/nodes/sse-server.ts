// Servers a test runs inside a sandbox to see what passes through the node that forwards to it, and a
// plain HTTP client that names the port host (fetch cannot set `host`).
import { request } from 'node:http';

/**
 * An SSE endpoint on port 9002: sends `data: first` at once, then `data: second` only once
 * /tmp/sse-go exists, then ends. A stream buffered anywhere on the way shows nothing until the end.
 */
export const SSE_SERVER = `
import http.server, os, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('content-type', 'text/event-stream')
        self.send_header('cache-control', 'no-cache')
        self.end_headers()
        self.wfile.write(b'data: first\\n\\n')
        self.wfile.flush()
        while not os.path.exists('/tmp/sse-go'):
            time.sleep(0.02)
        self.wfile.write(b'data: second\\n\\n')
        self.wfile.flush()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('0.0.0.0', 9002), H).serve_forever()
`;

/** GET through a node's port proxy: the body as it came, and when the first chunk arrived. */
export function getStream(
  port: number,
  host: string,
  onChunk: (text: string, soFar: string) => void = () => {},
): Promise<{ status: number; body: string; firstChunkAt: number; contentType: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
      let body = '';
      let firstChunkAt = 0;
      res.on('data', (x: Buffer) => {
        firstChunkAt ||= performance.now();
        body += x.toString();
        onChunk(x.toString(), body);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, firstChunkAt, contentType: res.headers['content-type'] }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
