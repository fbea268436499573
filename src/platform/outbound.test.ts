import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboundBlockedError, OutboundClient, type OutboundError } from './outbound.js';

// The guarded client against real servers on loopback. The "site" listens on 127.0.0.3, which the
// allow-list admits; the "trap" listens on 127.0.0.1 and [::1], which it does not: nothing may reach it.

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

async function serve(host: string, handler: (req: IncomingMessage, res: ServerResponse, body: string) => void) {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      handler(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  const port = (server.address() as AddressInfo).port;
  const h = host.includes(':') ? `[${host}]` : host;
  return {
    seen,
    port,
    url: `http://${h}:${port}`,
    close: () => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}

type Server = Awaited<ReturnType<typeof serve>>;
let site: Server;
let other: Server;
let trap4: Server;
let trap6: Server;
/** The open SSE answer: the test ends it once it has read the first event. */
let sse: ServerResponse | undefined;

beforeAll(async () => {
  trap4 = await serve('127.0.0.1', (_q, res) => res.writeHead(418).end('trap secret'));
  trap6 = await serve('::1', (_q, res) => res.writeHead(418).end('trap secret'));
  other = await serve('127.0.0.3', (_q, res) => res.writeHead(200).end('other origin'));
  site = await serve('127.0.0.3', (req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const to = u.searchParams.get('to');
    const status = Number(u.searchParams.get('status') ?? 302);
    if (u.pathname === '/redirect' && to) return void res.writeHead(status, { location: to }).end();
    if (u.pathname === '/hang') return; // never answers
    if (u.pathname === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      sse = res;
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`site ${req.method} ${u.pathname}`);
  });
});
afterAll(async () => {
  for (const s of [site, other, trap4, trap6]) await s?.close();
});

const client = () => new OutboundClient({ allow: ['127.0.0.3/32'] });
const redirect = (to: string, status = 302) => `${site.url}/redirect?status=${status}&to=${encodeURIComponent(to)}`;

describe('OutboundClient', () => {
  it('refuses a redirect to loopback, [::1], localhost or the metadata service; nothing reaches them', async () => {
    const c = client();
    try {
      const targets = [
        `${trap4.url}/secret`,
        `http://[::1]:${trap6.port}/secret`,
        `http://localhost:${trap4.port}/secret`,
        'http://169.254.169.254/latest/meta-data/',
        `http://[::ffff:127.0.0.1]:${trap4.port}/secret`,
        `http://2130706433:${trap4.port}/secret`,
      ];
      for (const to of targets) {
        const err = await c.request(redirect(to), { maxRedirects: 5 }).catch((e: unknown) => e);
        expect(err, to).toBeInstanceOf(OutboundBlockedError);
        expect((err as Error).message, to).toMatch(/^redirect to .* refused: /);
        expect((err as Error).message).not.toMatch(/\b418\b|trap/);
      }
      expect(trap4.seen).toEqual([]);
      expect(trap6.seen).toEqual([]);
    } finally {
      await c.close();
    }
  });

  it('refuses a first hop outside the allow-list, by literal and by name (at connect time)', async () => {
    const c = client();
    try {
      for (const url of [`${trap4.url}/x`, `http://localhost:${trap4.port}/x`, `http://[::1]:${trap6.port}/x`, 'ftp://127.0.0.3/x', `http://u:p@127.0.0.3:${site.port}/`]) {
        await expect(c.request(url), url).rejects.toBeInstanceOf(OutboundBlockedError);
      }
      expect(trap4.seen).toEqual([]);
      expect(trap6.seen).toEqual([]);
    } finally {
      await c.close();
    }
  });

  it('checks names with the resolver at connect time (a name that turns into loopback is refused)', async () => {
    const c = new OutboundClient({ allow: ['127.0.0.3/32'], resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
    try {
      await expect(c.request(`http://rebound.example:${trap4.port}/`)).rejects.toBeInstanceOf(OutboundBlockedError);
      expect(trap4.seen).toEqual([]);
    } finally {
      await c.close();
    }
  });

  it('follows allowed redirects up to maxRedirects; 0 returns the 3xx itself', async () => {
    const c = client();
    try {
      const r = await c.request(redirect(`${site.url}/landing`), { maxRedirects: 1 });
      expect(r.status).toBe(200);
      expect(r.url).toBe(`${site.url}/landing`);
      expect(await r.body.text()).toBe('site GET /landing');
      const raw = await c.request(redirect(`${site.url}/landing`));
      expect(raw.status).toBe(302);
      expect(raw.header('location')).toBe(`${site.url}/landing`);
      raw.discard();
      const twice = redirect(redirect(`${site.url}/landing`));
      const err = await c.request(twice, { maxRedirects: 1 }).catch((e: unknown) => e);
      expect((err as OutboundError).code).toBe('TooManyRedirects');
    } finally {
      await c.close();
    }
  });

  it('drops credentials on a redirect to another origin, keeps them on the same origin; 303 turns POST into GET, 307 keeps it', async () => {
    const c = client();
    try {
      const headers = { authorization: 'Bearer secret', 'content-type': 'application/json' };
      const before = other.seen.length;
      await (await c.request(redirect(`${other.url}/x`, 307), { method: 'POST', body: '{"a":1}', headers, maxRedirects: 1 })).body.text();
      const atOther = other.seen[before]!;
      expect(atOther.method).toBe('POST');
      expect(atOther.body).toBe('{"a":1}');
      expect(atOther.headers.authorization).toBeUndefined();

      const n = site.seen.length;
      await (await c.request(redirect(`${site.url}/same`, 303), { method: 'POST', body: '{"a":1}', headers, maxRedirects: 1 })).body.text();
      const same = site.seen[n + 1]!;
      expect(same).toMatchObject({ method: 'GET', url: '/same', body: '' });
      expect(same.headers.authorization).toBe('Bearer secret');
      expect(same.headers['content-type']).toBeUndefined();
    } finally {
      await c.close();
    }
  });

  it('reaches a trusted origin on loopback without the allow-list, and still checks its redirects', async () => {
    const c = new OutboundClient({ allow: [] });
    try {
      const ok = await c.request(`${trap4.url}/search`, { trustedOrigin: `${trap4.url}/base` });
      expect(ok.status).toBe(418);
      await ok.body.text();
      expect(trap4.seen).toHaveLength(1);
      trap4.seen.length = 0;
      // Another port on the same address is another origin: refused.
      await expect(c.request(`http://127.0.0.1:${site.port}/`, { trustedOrigin: trap4.url })).rejects.toBeInstanceOf(OutboundBlockedError);
      // Untrusted without the option.
      await expect(c.request(`${trap4.url}/x`)).rejects.toBeInstanceOf(OutboundBlockedError);
      expect(trap4.seen).toEqual([]);
    } finally {
      await c.close();
    }
  });

  it('a time limit covers the exchange (OutboundTimeout); the caller can cancel (OutboundAborted)', async () => {
    const c = client();
    try {
      const err = await c.request(`${site.url}/hang`, { timeoutMs: 200 }).catch((e: unknown) => e);
      expect((err as OutboundError).code).toBe('OutboundTimeout');
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 100);
      const aborted = await c.request(`${site.url}/hang`, { signal: ac.signal }).catch((e: unknown) => e);
      expect((aborted as OutboundError).code).toBe('OutboundAborted');
      const refused = await c.request(`http://127.0.0.3:${await freePort()}/`).catch((e: unknown) => e);
      expect((refused as OutboundError).code).toBe('ConnectionRefused');
    } finally {
      await c.close();
    }
  });

  it('hands over a streamed body (SSE) as it arrives', async () => {
    const c = client();
    try {
      const r = await c.request(`${site.url}/sse`, { headers: { accept: 'text/event-stream' } });
      expect(r.header('content-type')).toBe('text/event-stream');
      const events: string[] = [];
      for await (const chunk of r.body as AsyncIterable<Buffer>) {
        events.push(chunk.toString());
        // The server writes the second event only now: a client that waited for the end would hang.
        if (events.length === 1) sse?.end('data: two\n\n');
      }
      expect(events).toEqual(['data: one\n\n', 'data: two\n\n']);
    } finally {
      await c.close();
    }
  });
});

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.3', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}
