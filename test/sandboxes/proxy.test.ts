// expose + the port proxy: HTTP to a server inside through `<port>-<id>.sandbox.localhost`, a WebSocket
// upgrade through it, unexposed ports and unknown sandboxes are 404.
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube } from './helpers.js';

let t: SandboxNube;
let id: string;
let port: number;

// A WebSocket-style server inside: answers the upgrade with 101 and echoes every byte after it.
const WS_SERVER = `
const http = require('http');
const crypto = require('crypto');
const s = http.createServer((req, res) => res.end('plain'));
s.on('upgrade', (req, sock) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + '\\r\\n\\r\\n');
  sock.on('data', (d) => sock.write(d));
});
s.listen(9001, () => console.log('ready'));
`;

function get(host: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function waitForHttp(host: string): Promise<{ status: number; body: string }> {
  for (let i = 0; i < 100; i++) {
    const r = await get(host);
    if (r.status === 200) return r;
    await new Promise((res) => setTimeout(res, 100));
  }
  return get(host);
}

describe.each(DRIVERS)('%s: exposed ports', (driver) => {
  beforeAll(async () => {
    t = await startSandboxNube('proxy', { NUBE_SANDBOX_DRIVER: driver });
    port = Number(new URL(t.baseUrl).port);
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 300 });
    id = c.body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/www/index.html', content: '<h1>inside</h1>' });
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/ws.js', content: WS_SERVER });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 -m http.server 8080 --bind 0.0.0.0', cwd: '/root/www' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec node /root/ws.js' });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('expose returns the public URL and the proxy serves the port inside', async () => {
    const e = await t.call('POST', `/sandboxes/${id}/expose`, { port: 8080 });
    expect(e.status).toBe(200);
    // The URL spells the id DNS-safe (`sbx-...`); the proxy takes both spellings.
    expect(e.body.url).toBe(`http://8080-${id.replace('_', '-')}.sandbox.localhost:${port}`);
    expect((await t.call('GET', `/sandboxes/${id}`)).body.urls).toEqual([{ port: 8080, url: e.body.url }]);
    const r = await waitForHttp(new URL(e.body.url).host);
    expect(r).toEqual({ status: 200, body: '<h1>inside</h1>' });
    // The API's own spelling of the id (`sbx_...`) reaches the same sandbox.
    expect((await get(`8080-${id}.sandbox.localhost:${port}`)).body).toBe('<h1>inside</h1>');
  });

  it('unexposed ports, unknown sandboxes and the plain API host behave', async () => {
    expect((await get(`9001-${id}.sandbox.localhost:${port}`)).status).toBe(404);
    expect((await get(`8080-sbx_nosuchsandbox.sandbox.localhost:${port}`)).status).toBe(404);
    expect((await get(`127.0.0.1:${port}`, '/healthz')).status).toBe(200);
  });

  it('a WebSocket upgrade passes through both ways', async () => {
    await t.call('POST', `/sandboxes/${id}/expose`, { port: 9001 });
    await waitForHttp(`9001-${id}.sandbox.localhost:${port}`);
    const sock = await new Promise<Socket>((resolve, reject) => {
      const req = request({
        host: '127.0.0.1',
        port,
        path: '/chat',
        headers: {
          host: `9001-${id}.sandbox.localhost:${port}`,
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
          'sec-websocket-version': '13',
        },
      });
      req.on('upgrade', (res, s) => {
        expect(res.statusCode).toBe(101);
        expect(res.headers['sec-websocket-accept']).toBe('s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
        resolve(s);
      });
      req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on('error', reject);
      req.end();
    });
    const echoed = await new Promise<string>((resolve) => {
      sock.once('data', (d) => resolve(d.toString()));
      sock.write('ping through the proxy');
    });
    expect(echoed).toBe('ping through the proxy');
    sock.destroy();
  });

  it('proxied traffic wakes a suspended sandbox', async () => {
    await t.call('POST', `/sandboxes/${id}/suspend`);
    // Its processes stopped with it; the bootstrap is how a server comes back at every wake.
    await t.call('POST', `/sandboxes/${id}/bootstrap`, {
      script: 'cd /root/www && exec python3 -m http.server 8080 --bind 0.0.0.0',
      mode: 'async',
    });
    // The request that wakes it waits for the server the bootstrap starts.
    expect(await get(`8080-${id}.sandbox.localhost:${port}`)).toEqual({ status: 200, body: '<h1>inside</h1>' });
    expect((await t.call('GET', `/sandboxes/${id}`)).body.status).toBe('running');
  });
});
