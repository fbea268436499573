import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Nube, RateLimitError, ServerError, ServiceUnavailableError } from '../src/index.js';
import { retryDelayMs } from '../src/retry.js';

// A local server that answers from a script: each request takes the next [status, headers, body];
// past the script it answers 200. Every request's method, path and arrival time is recorded.
type Answer = [number, Record<string, string>, unknown];
let script: Answer[] = [];
let seen: { method: string; url: string; at: number }[] = [];
let server: Server;
let baseUrl: string;
const key = `nube_sk_live_${'a'.repeat(40)}`;

const rateLimited = (retryAfter: string): Answer => [
  429,
  { 'retry-after': retryAfter },
  { error: 'rate limit exceeded', code: 'RateLimited' },
];
const busy: Answer = [503, {}, { error: 'busy', code: 'Unavailable' }];

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', at: Date.now() });
    req.resume();
    const [status, headers, body] = script.shift() ?? [200, {}, { ok: true, items: [] }];
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));
beforeEach(() => {
  script = [];
  seen = [];
});

const gaps = () => seen.slice(1).map((s, i) => s.at - seen[i]!.at);

describe('retries of idempotent calls', () => {
  it('a GET answered 429 with Retry-After: 1 is sent again after that second and succeeds', async () => {
    script = [rateLimited('1')];
    const nube = new Nube({ apiKey: key, baseUrl });
    expect(await nube.account.keys.list()).toEqual({ ok: true, items: [] });
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual(['GET /api/v2/account/keys', 'GET /api/v2/account/keys']);
    expect(gaps()[0]).toBeGreaterThanOrEqual(950);
  });

  it('Retry-After as an HTTP date is honoured too', async () => {
    script = [rateLimited(new Date(Date.now() + 2000).toUTCString())];
    await new Nube({ apiKey: key, baseUrl }).account.get();
    expect(seen).toHaveLength(2);
    // The date has a resolution of one second: at least one second of it was left.
    expect(gaps()[0]).toBeGreaterThanOrEqual(950);
  });

  it('503 without Retry-After backs off (0.25-0.5 s, then 0.5-1 s) and gives up after maxRetries with the last error', async () => {
    script = [busy, busy, busy, busy];
    const err = await new Nube({ apiKey: key, baseUrl }).account.get().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceUnavailableError);
    expect(err).toBeInstanceOf(ServerError);
    expect(seen).toHaveLength(3); // the call and maxRetries (default 2) more
    const [first, second] = gaps();
    expect(first).toBeGreaterThanOrEqual(240);
    expect(second).toBeGreaterThanOrEqual(490);
  });

  it('a DELETE is retried; a POST never is (it could create twice)', async () => {
    script = [busy];
    expect(await new Nube({ apiKey: key, baseUrl }).account.keys.revoke('key_1')).toEqual({ ok: true, items: [] });
    expect(seen.map((s) => s.method)).toEqual(['DELETE', 'DELETE']);
    seen = [];
    script = [rateLimited('0')];
    const err = await new Nube({ apiKey: key, baseUrl }).account.keys.create({ name: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitError);
    expect(seen.map((s) => s.method)).toEqual(['POST']);
  });

  it('other errors are not retried: 500, 502, a 503 that names missing configuration', async () => {
    for (const answer of [
      [500, {}, { error: 'internal error', code: 'InternalError' }],
      [502, {}, { error: 'bad gateway' }],
      [503, {}, { error: 'no search provider', code: 'SearchNotConfigured' }],
    ] as Answer[]) {
      seen = [];
      script = [answer];
      const err = await new Nube({ apiKey: key, baseUrl }).account.get().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServerError);
      expect(seen, JSON.stringify(answer)).toHaveLength(1);
    }
  });

  it('maxRetries 0 (client or call) turns retries off', async () => {
    script = [rateLimited('0'), rateLimited('0')];
    await expect(new Nube({ apiKey: key, baseUrl, maxRetries: 0 }).account.get()).rejects.toBeInstanceOf(RateLimitError);
    await expect(new Nube({ apiKey: key, baseUrl }).account.get({ maxRetries: 0 })).rejects.toBeInstanceOf(RateLimitError);
    expect(seen).toHaveLength(2);
  });

  it('a wait that would pass timeoutMs is not started: the 429 comes back at once', async () => {
    script = [rateLimited('5')];
    const started = Date.now();
    const err = await new Nube({ apiKey: key, baseUrl, timeoutMs: 2000 }).account.get().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitError);
    expect((err as RateLimitError).retryAfter).toBe(5);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(seen).toHaveLength(1);
  });

  it('aborting the signal during the wait ends the call with its reason', async () => {
    script = [rateLimited('10')];
    const controller = new AbortController();
    const call = new Nube({ apiKey: key, baseUrl }).account.get({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error('caller gave up')), 200);
    await expect(call).rejects.toThrow('caller gave up');
    expect(seen).toHaveLength(1);
  });
});

describe('retryDelayMs', () => {
  it('is Retry-After when given (up to 60 s), else doubling from 0.5 s to 8 s with half of it random', () => {
    const limited = (s?: number) => new RateLimitError('x', { status: 429 }, s);
    expect(retryDelayMs(limited(3), 0)).toBe(3000);
    expect(retryDelayMs(limited(61), 0)).toBeUndefined();
    expect([0, 1, 2, 3, 4, 5].map((n) => retryDelayMs(limited(), n, () => 0))).toEqual([250, 500, 1000, 2000, 4000, 4000]);
    expect([0, 5].map((n) => retryDelayMs(limited(), n, () => 1))).toEqual([500, 8000]);
    expect(retryDelayMs(new ServerError('x', { status: 500 }), 0)).toBeUndefined();
  });
});
