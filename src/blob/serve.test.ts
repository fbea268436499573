import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serveBlob } from './serve.js';
import { type Backend, localBackend, readAll, s3Backend, startBlobHttp } from './test-fixtures.js';

describe.each([
  ['local', (base: string) => localBackend(base)],
  ['s3', (_base: string) => s3Backend()],
])('serveBlob and presigned URLs (%s)', (name, make) => {
  let b: Backend;
  let http: { baseUrl: string; server: Server };
  const data = randomBytes(1000);
  let etag: string;

  beforeAll(async () => {
    http = await startBlobHttp(() => b.stores);
    b = await make(http.baseUrl);
    etag = (await b.stores.at('US').put('s/obj', Readable.from([data]), { contentType: 'text/csv' })).etag;
  });
  afterAll(async () => {
    await b?.close();
    http?.server.close();
  });

  const serve = (headers: Record<string, string>, method = 'GET') => serveBlob(b.stores.at('US'), 's/obj', headers, method);
  const body = async (r: Awaited<ReturnType<typeof serve>>) => (r.body ? readAll(r.body) : Buffer.alloc(0));

  it('200 with stored type, length, ETag, Last-Modified, Accept-Ranges', async () => {
    const r = await serve({});
    expect(r.status).toBe(200);
    expect(r.headers).toMatchObject({
      'content-type': 'text/csv',
      'content-length': '1000',
      etag: `"${etag}"`,
      'accept-ranges': 'bytes',
      'x-content-type-options': 'nosniff',
    });
    expect(Date.parse(r.headers['last-modified'])).not.toBeNaN();
    expect((await body(r)).equals(data)).toBe(true);
  });

  it('HEAD has the headers and no body', async () => {
    const r = await serve({}, 'HEAD');
    expect(r).toMatchObject({ status: 200, headers: { 'content-length': '1000' } });
    expect(r.body).toBeUndefined();
  });

  it.each([
    ['bytes=0-9', 0, 9],
    ['bytes=990-', 990, 999],
    ['bytes=-10', 990, 999],
    ['bytes=-5000', 0, 999],
    ['bytes=500-100000', 500, 999],
  ])('Range %s -> 206', async (range, start, end) => {
    const r = await serve({ range });
    expect(r.status).toBe(206);
    expect(r.headers['content-range']).toBe(`bytes ${start}-${end}/1000`);
    expect(r.headers['content-length']).toBe(String(end - start + 1));
    expect((await body(r)).equals(data.subarray(start, end + 1))).toBe(true);
  });

  it.each(['bytes=1000-', 'bytes=5-2', 'bytes=-0', 'bytes=abc', 'bytes=1000-2000'])('Range %s -> 416', async (range) => {
    const r = await serve({ range });
    expect(r.status).toBe(416);
    expect(r.headers['content-range']).toBe('bytes */1000');
    expect(r.body).toBeUndefined();
  });

  it('multiple ranges or another unit get the whole object', async () => {
    expect((await serve({ range: 'bytes=0-1,5-6' })).status).toBe(200);
    expect((await serve({ range: 'items=0-1' })).status).toBe(200);
  });

  it('If-None-Match -> 304 (strong, weak, list, *); mismatch -> 200', async () => {
    for (const inm of [`"${etag}"`, `W/"${etag}"`, `"nope", "${etag}"`, '*']) {
      const r = await serve({ 'if-none-match': inm });
      expect(r.status).toBe(304);
      expect(r.headers.etag).toBe(`"${etag}"`);
      expect(r.body).toBeUndefined();
    }
    const r = await serve({ 'if-none-match': '"other"' });
    expect(r.status).toBe(200);
    r.body?.destroy();
  });

  it('If-Modified-Since -> 304 when not modified since, 200 when older; If-None-Match takes precedence', async () => {
    const head = await b.stores.at('US').head('s/obj');
    const lm = head?.lastModified as Date;
    expect((await serve({ 'if-modified-since': new Date(lm.getTime() + 60_000).toUTCString() })).status).toBe(304);
    const older = await serve({ 'if-modified-since': new Date(lm.getTime() - 60_000).toUTCString() });
    expect(older.status).toBe(200);
    older.body?.destroy();
    const both = await serve({ 'if-none-match': '"other"', 'if-modified-since': new Date(lm.getTime() + 60_000).toUTCString() });
    expect(both.status).toBe(200);
    both.body?.destroy();
  });

  it('If-Range with a stale ETag ignores Range', async () => {
    const fresh = await serve({ range: 'bytes=0-1', 'if-range': `"${etag}"` });
    expect(fresh.status).toBe(206);
    fresh.body?.destroy();
    const stale = await serve({ range: 'bytes=0-1', 'if-range': '"old"' });
    expect(stale.status).toBe(200);
    stale.body?.destroy();
  });

  it('404 for a missing key, 405 for other methods', async () => {
    expect((await serveBlob(b.stores.at('US'), 's/missing', {}, 'GET')).status).toBe(404);
    expect((await serve({}, 'POST')).status).toBe(405);
  });

  it('presigned PUT then presigned GET round-trip over HTTP with the signed content type', async () => {
    const store = b.stores.at('EU');
    const payload = Buffer.from('{"hello":"world"}');
    const putUrl = await store.presign('u/doc', {
      method: 'PUT',
      expiresInSeconds: 60,
      contentType: 'application/json',
      size: payload.length,
    });
    const put = await fetch(putUrl, { method: 'PUT', body: payload, headers: { 'content-type': 'application/json' } });
    expect(put.status).toBe(200);
    const getUrl = await store.presign('u/doc', { method: 'GET', expiresInSeconds: 60 });
    const got = await fetch(getUrl);
    expect(got.status).toBe(200);
    expect(got.headers.get('content-type')).toBe('application/json');
    expect(Buffer.from(await got.arrayBuffer()).equals(payload)).toBe(true);
    const ranged = await fetch(getUrl, { headers: { range: 'bytes=1-7' } });
    expect(ranged.status).toBe(206);
    expect(await ranged.text()).toBe('"hello"');
  });

  it('an expired presigned URL is refused with 403', async () => {
    const store = b.stores.at('US');
    b.clock.offsetMs = -120_000; // signed two minutes ago, valid for one
    const url = await store.presign('s/obj', { method: 'GET', expiresInSeconds: 60 });
    b.clock.offsetMs = 0;
    const r = await fetch(url);
    expect(r.status).toBe(403);
    await r.arrayBuffer();
  });

  it.runIf(name === 'local')('a presigned PUT with the wrong length is refused and stores nothing', async () => {
    const store = b.stores.at('US');
    const url = await store.presign('u/len', { method: 'PUT', expiresInSeconds: 60, size: 10, maxBytes: 100 });
    const r = await fetch(url, { method: 'PUT', body: Buffer.alloc(11) });
    expect(r.status).toBe(400);
    expect(await r.text()).toBe('SizeMismatch');
    const url2 = await store.presign('u/len', { method: 'PUT', expiresInSeconds: 60, maxBytes: 100 });
    const r2 = await fetch(url2, { method: 'PUT', body: Buffer.alloc(101) });
    expect(r2.status).toBe(413);
    await r2.arrayBuffer();
    expect(await store.head('u/len')).toBeNull();
  });

  it.runIf(name === 'local')('a local PUT URL is single-use (nonce claimed by the caller)', async () => {
    const url = await b.stores.at('US').presign('u/once', { method: 'PUT', expiresInSeconds: 60 });
    expect((await fetch(url, { method: 'PUT', body: 'one' })).status).toBe(200);
    const again = await fetch(url, { method: 'PUT', body: 'two' });
    expect(again.status).toBe(403);
    await again.arrayBuffer();
  });

  it.runIf(name === 'local')('a tampered local URL is refused with 403', async () => {
    const url = await b.stores.at('US').presign('s/obj', { method: 'GET', expiresInSeconds: 60 });
    const token = url.slice(url.lastIndexOf('/') + 1);
    const [payload, sig] = token.split('.');
    const forged = Buffer.from(payload, 'base64url').toString().replace('s/obj', 's/oth');
    for (const t of [`${Buffer.from(forged).toString('base64url')}.${sig}`, `${payload}.${sig.slice(0, -2)}AA`]) {
      const r = await fetch(`${http.baseUrl}/${t}`);
      expect(r.status).toBe(403);
      expect(await r.text()).toBe('BadSignature');
    }
  });
});
