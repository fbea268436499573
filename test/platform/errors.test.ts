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
