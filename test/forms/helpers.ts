import { request } from 'node:http';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  json(): any;
}

/**
 * One HTTP request to nube's listener at `baseUrl`, with the Host a browser would send (a site's host,
 * or nube's own), from a loopback address of the test's choosing: rate limits count per address.
 */
export function send(
  baseUrl: string,
  opts: {
    path: string;
    host?: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    from?: string;
  },
): Promise<Answer> {
  const base = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        path: opts.path,
        method: opts.method ?? 'POST',
        localAddress: opts.from,
        headers: {
          ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}),
          ...opts.headers,
          host: opts.host ?? base.host,
        },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** A browser's multipart body for `form`: its bytes and content type (with the boundary). */
export async function multipart(form: FormData): Promise<{ body: Buffer; type: string }> {
  const r = new Response(form);
  return { body: Buffer.from(await r.arrayBuffer()), type: r.headers.get('content-type')! };
}

export const URLENCODED = { 'content-type': 'application/x-www-form-urlencoded' };
