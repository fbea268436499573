import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startNube, type TestNube } from '../helpers/server.js';

let t: TestNube;
beforeAll(async () => {
  t = await startNube({ env: { NUBE_BODY_LIMIT_BYTES: '4096' } });
});
afterAll(() => t.close());

const req = (path: string, init: RequestInit = {}) => fetch(t.baseUrl + path, init);

describe('error bodies', () => {
  it('401 for a missing, malformed, unknown or revoked credential', async () => {
    const variants: Record<string, string>[] = [{}, { authorization: 'Bearer nope' }, { 'x-api-key': `${t.ownerKey}x` }, { authorization: 'Basic abc' }];
    for (const headers of variants) {
      const r = await req('/api/v2/account', { headers });
      expect(r.status).toBe(401);
      expect(await json(r)).toEqual({ error: 'missing or invalid credential', code: 'Unauthorized' });
    }
  });

  it('accepts the owner key as Bearer and as X-API-Key', async () => {
    expect((await req('/api/v2/account', { headers: t.auth })).status).toBe(200);
    expect((await req('/api/v2/account', { headers: { 'x-api-key': t.ownerKey } })).status).toBe(200);
  });

  it('404 for an absent route, 405 with Allow for a known path with another method', async () => {
    const r404 = await req('/api/v2/nothing-here', { headers: t.auth });
    expect(r404.status).toBe(404);
    expect((await json(r404)).code).toBe('NotFound');
    const r405 = await req('/api/v2/account', { method: 'DELETE', headers: t.auth });
    expect(r405.status).toBe(405);
    expect(r405.headers.get('allow')).toBe('GET');
    expect((await json(r405)).code).toBe('MethodNotAllowed');
  });

  it('400 with issues for malformed JSON and for an invalid body', async () => {
    const h = { ...t.auth, 'content-type': 'application/json' };
    const bad = await req('/api/v2/account/keys', { method: 'POST', headers: h, body: '{"name":' });
    expect(bad.status).toBe(400);
    const badBody = await json(bad);
    expect(badBody.code).toBe('InvalidJson');
    expect(badBody.issues[0].path).toEqual(['body']);
    const invalid = await req('/api/v2/account/keys', { method: 'POST', headers: h, body: JSON.stringify({ name: 5 }) });
    expect(invalid.status).toBe(400);
    const inv = await json(invalid);
    expect(inv.code).toBe('ValidationError');
    expect(inv.issues[0].path).toEqual(['body', 'name']);
  });

  it('413 for an oversized body', async () => {
    const r = await req('/api/v2/account/keys', {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'x'.repeat(10_000) }),
    });
    expect(r.status).toBe(413);
    expect((await json(r)).code).toBe('PayloadTooLarge');
  });

  it('500 without internals, with the request id', async () => {
    const svc = t.nube.services.account;
    const original = svc.getAccount;
    svc.getAccount = async () => {
      throw new Error('secret internal detail /etc/passwd');
    };
    try {
      const r = await req('/api/v2/account', { headers: { ...t.auth, 'x-request-id': 'trace-123' } });
      expect(r.status).toBe(500);
      expect(r.headers.get('x-request-id')).toBe('trace-123');
      const text = await r.text();
      expect(text).not.toContain('secret');
      expect(JSON.parse(text)).toEqual({ error: 'internal error', code: 'InternalError' });
    } finally {
      svc.getAccount = original;
    }
  });
});

/** Sends raw bytes on a fresh connection and returns every response it gets back, parsed. */
function raw(base: string, text: string): Promise<{ status: number; body: Record<string, unknown> }[]> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname, () => s.write(text));
    let got = '';
    s.on('data', (d) => {
      got += d;
    });
    s.on('error', () => {});
    s.on('close', () => {
      const out: { status: number; body: Record<string, unknown> }[] = [];
      for (const m of got.matchAll(/HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/g)) {
        const len = Number(/content-length: (\d+)/i.exec(m[2]!)?.[1] ?? 0);
        const start = m.index! + m[0].length;
        out.push({ status: Number(m[1]), body: JSON.parse(got.slice(start, start + len)) });
      }
      if (out.length === 0) reject(new Error(`no HTTP response in ${JSON.stringify(got.slice(0, 200))}`));
      else resolve(out);
    });
    setTimeout(() => s.destroy(), 10_000).unref();
  });
}

/** The one error shape: a string `error`, a string `code`, optionally `issues`; nothing of Fastify's own. */
function oneShape(body: Record<string, unknown>, code: string): void {
  expect(body).toMatchObject({ error: expect.any(String), code });
  expect(body).not.toHaveProperty('statusCode');
  expect(body).not.toHaveProperty('message');
}

describe("the HTTP layer's own errors in the one shape", () => {
  it('414 for a path segment past the router limit and for a URL past the request line limit', async () => {
    const seg = await req(`/api/v2/files/${'x'.repeat(600)}`, { headers: t.auth });
    expect(seg.status).toBe(414);
    oneShape(await json(seg), 'UriTooLong');
    const [line] = await raw(t.baseUrl, `GET /api/v2/account?${'x'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(line!.status).toBe(414);
    oneShape(line!.body, 'UriTooLong');
  });

  it('431 for headers past the limit', async () => {
    const [r] = await raw(t.baseUrl, `GET /api/v2/account HTTP/1.1\r\nHost: x\r\nX-Big: ${'x'.repeat(20_000)}\r\n\r\n`);
    expect(r!.status).toBe(431);
    oneShape(r!.body, 'HeadersTooLarge');
  });

  it('400 for a malformed request and for bad percent-encoding', async () => {
    const [garbage] = await raw(t.baseUrl, 'GARBAGE\r\n\r\n');
    expect(garbage!.status).toBe(400);
    oneShape(garbage!.body, 'BadRequest');
    const bad = await req('/api/v2/files/%E0%A4%A', { headers: t.auth });
    expect(bad.status).toBe(400);
    oneShape(await json(bad), 'BadUrl');
  });

  it('415 for a JSON body sent as text/plain, with no content type, or as another type', async () => {
    const body = JSON.stringify({ name: 'x' });
    for (const type of ['text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'application/xml']) {
      const r = await req('/api/v2/account/keys', { method: 'POST', headers: { ...t.auth, 'content-type': type }, body });
      expect(r.status, type).toBe(415);
      oneShape(await json(r), 'UnsupportedMediaType');
    }
    const auth = t.auth.authorization;
    const [none] = await raw(
      t.baseUrl,
      `POST /api/v2/account/keys HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(none!.status).toBe(415);
    oneShape(none!.body, 'UnsupportedMediaType');
    // Nothing was created by any of them.
    const keys = await json(await req('/api/v2/account/keys', { headers: t.auth }));
    expect(keys.items.filter((k: { name: string }) => k.name === 'x')).toEqual([]);
  });

  it('503 for a request that reaches nube while it shuts down', async () => {
    const n = await startNube();
    const svc = n.nube.services.account;
    const original = svc.getAccount.bind(svc);
    let started!: () => void;
    const inHandler = new Promise<void>((r) => {
      started = r;
    });
    svc.getAccount = async (p) => {
      started();
      await new Promise((r) => setTimeout(r, 500));
      return original(p);
    };
    // A request in flight holds close() open; one arriving meanwhile (a keep-alive connection, a load
    // balancer that has not noticed yet) is refused.
    const inflight = fetch(`${n.baseUrl}/api/v2/account`, { headers: n.auth });
    await inHandler;
    const closing = n.close();
    const late = await n.nube.app.inject({ method: 'GET', url: '/api/v2/account', headers: n.auth });
    expect((await inflight).status).toBe(200);
    await closing;
    expect(late.statusCode).toBe(503);
    expect(late.headers.connection).toBe('close');
    oneShape(JSON.parse(late.body), 'Unavailable');
  });
});

describe('rate limits', () => {
  it('429 with Retry-After past the per-owner limit', async () => {
    const small = await startNube({ env: { NUBE_RATE_LIMIT_PER_MINUTE: '3' } });
    try {
      const codes: number[] = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 5; i++) {
        const r = await fetch(`${small.baseUrl}/api/v2/account`, { headers: small.auth });
        codes.push(r.status);
        if (r.status === 429) {
          retryAfter = r.headers.get('retry-after');
          expect((await json(r)).code).toBe('RateLimited');
        }
      }
      expect(codes).toEqual([200, 200, 200, 429, 429]);
      expect(Number(retryAfter)).toBeGreaterThan(0);
      expect(Number(retryAfter)).toBeLessThanOrEqual(60);
    } finally {
      await small.close();
    }
  });
});
