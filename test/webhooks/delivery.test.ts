import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { FAST, until, verify } from './helpers.js';
import { type Receiver, startReceiver } from './receiver.js';

describe.each(DIALECTS)('webhook delivery (%s)', (dialect) => {
  let t: TestNube;
  let rx: Receiver;
  let ownerId: string;
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: { ...t.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: await json(r) };
  };
  const hook = async (events = ['file.created']) => {
    const r = await api('POST', '/webhooks', { url: rx.url, events });
    expect(r.status).toBe(201);
    return r.body as { id: string; secret: string };
  };
  const publish = (event: string, data: Record<string, unknown> = {}, owner = ownerId) =>
    t.nube.deps.events.emit({ event, ownerId: owner, data });
  const deliveries = async (id: string, query = '') => (await api('GET', `/webhooks/${id}/deliveries${query}`)).body;
  beforeAll(async () => {
    t = await startNube({ dialect, env: FAST });
    ownerId = (await api('GET', '/account')).body.id;
    rx = await startReceiver();
  });
  afterAll(async () => {
    await t?.close();
    await rx?.close();
  });
  afterEach(async () => {
    for (const w of (await api('GET', '/webhooks')).body.items) await api('DELETE', `/webhooks/${w.id}`);
    rx.got.length = 0;
    rx.status = 200;
    rx.delayMs = 0;
    rx.delayFirst = undefined;
  });

  it('POSTs { event, timestamp, data } signed with the secret, only for subscribed events of the owner', async () => {
    const w = await hook(['file.created', 'database.created']);
    await publish('file.deleted', { id: 'f1' });
    await publish('file.created', { id: 'f2' }, 'acct_someone_else');
    await publish('file.created', { id: 'f3', name: 'a.txt' });
    const [got] = await rx.waitFor(1);
    await sleep(300);
    expect(rx.got).toHaveLength(1);
    const body = JSON.parse(got!.raw);
    expect(body).toEqual({ event: 'file.created', timestamp: expect.any(String), data: { id: 'f3', name: 'a.txt' } });
    expect(new Date(body.timestamp).toISOString()).toBe(body.timestamp);
    expect(got!.headers['content-type']).toBe('application/json');
    expect(verify(w.secret, got!.raw, got!.headers['x-service-signature'])).toBe(true);
    expect(verify(`${w.secret}x`, got!.raw, got!.headers['x-service-signature'])).toBe(false);
    expect(got!.headers['x-service-delivery']).toMatch(/^dlv_[0-9a-z]+$/);
    expect(got!.headers['x-service-event']).toBe('file.created');
    expect(Number(got!.headers['x-service-timestamp'])).toBeGreaterThan(Date.now() / 1000 - 60);

    const list = await until(() => deliveries(w.id), (l) => l.items[0]?.status === 'succeeded');
    expect(list.items).toHaveLength(1);
    expect(list.items[0]).toMatchObject({
      id: got!.headers['x-service-delivery'],
      event: 'file.created',
      status: 'succeeded',
      attemptCount: 1,
      lastStatusCode: 200,
      attempts: [{ attempt: 1, statusCode: 200, error: null, response: 'answer 200' }],
    });
    expect((await api('GET', `/webhooks/${w.id}`)).body.lastDeliveryAt).not.toBeNull();

    // Any event name of the catalogue goes through the bus with no change in the webhooks area.
    await publish('database.created', { name: 'db1' });
    const again = await rx.waitFor(2);
    expect(JSON.parse(again[1]!.raw).event).toBe('database.created');
  });

  it('retries a failing receiver with the same delivery id, pauses after 5 consecutive failures, then sends nothing', async () => {
    const w = await hook();
    rx.status = 500;
    await publish('file.created', { id: 'f-fail' });
    await rx.waitFor(5);
    const paused = await until(() => api('GET', `/webhooks/${w.id}`), (r) => r.body.status === 'PAUSED');
    expect(paused.body).toMatchObject({ status: 'PAUSED', failureCount: 5, lastError: 'HTTP 500' });
    await sleep(1000); // longer than the remaining schedule: nothing more may arrive
    expect(rx.got).toHaveLength(5);
    const ids = new Set(rx.got.map((g) => g.headers['x-service-delivery']));
    expect(ids.size).toBe(1);
    expect(rx.got.map((g) => g.headers['x-service-attempt'])).toEqual(['1', '2', '3', '4', '5']);
    expect(rx.got.every((g) => g.raw === rx.got[0]!.raw && verify(w.secret, g.raw, g.headers['x-service-signature']))).toBe(true);

    // Events while PAUSED are recorded as skipped, not sent.
    await publish('file.created', { id: 'while-paused' });
    // Wait for the event's record rather than a fixed time: under load the write can take a while.
    const list = await until(
      () => deliveries(w.id),
      // biome-ignore lint/suspicious/noExplicitAny: JSON body
      (l: any) => l.items.length === 2 && l.items.every((d: { status: string }) => d.status === 'skipped'),
    );
    expect(rx.got).toHaveLength(5);
    expect(list.items.map((d: { status: string }) => d.status)).toEqual(['skipped', 'skipped']);
    const first = list.items[1];
    expect(first.attemptCount).toBe(5);
    expect(first.attempts.map((a: { statusCode: number }) => a.statusCode)).toEqual([500, 500, 500, 500, 500]);
    expect(first.attempts[0].durationMs).toBeGreaterThanOrEqual(0);
    const redeliverPaused = await api('POST', `/webhooks/${w.id}/deliveries/${first.id}/redeliver`);
    expect(redeliverPaused.status).toBe(409);

    // PATCH ACTIVE resumes and resets the counter; skipped deliveries can be redelivered.
    rx.status = 200;
    const resumed = await api('PATCH', `/webhooks/${w.id}`, { status: 'ACTIVE' });
    expect(resumed.body).toMatchObject({ status: 'ACTIVE', failureCount: 0 });
    const skipped = list.items[0];
    const re = await api('POST', `/webhooks/${w.id}/deliveries/${skipped.id}/redeliver`);
    expect(re.status).toBe(200);
    expect(re.body.status).toBe('pending');
    const got = await rx.waitFor(6);
    expect(got[5]!.headers['x-service-delivery']).toBe(skipped.id);
    expect(JSON.parse(got[5]!.raw).data).toEqual({ id: 'while-paused' });
    await publish('file.created', { id: 'after-resume' });
    const after = await rx.waitFor(7);
    expect(JSON.parse(after[6]!.raw).data).toEqual({ id: 'after-resume' });
  });

  it('counts a timeout as a failure and a success resets the counter', async () => {
    // Its own nube with a 400 ms timeout, and a receiver 25 times slower than that for its first two
    // requests: no machine is fast enough to make those answers arrive in time. The third attempt comes
    // 8 s after the second, time enough to see the count at 2 however busy the machine.
    const slow = await startNube({
      dialect,
      env: { ...FAST, NUBE_WEBHOOK_TIMEOUT_MS: '400', NUBE_WEBHOOK_RETRY_SCHEDULE: '150ms,8s,150ms' },
    });
    try {
      const call = async (method: string, path: string, body?: unknown) => {
        const r = await fetch(`${slow.baseUrl}/api/v2${path}`, {
          method,
          headers: { ...slow.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        return json(r);
      };
      const w = await call('POST', '/webhooks', { url: rx.url, events: ['file.created'] });
      const owner = (await call('GET', '/account')).id;
      rx.delayMs = 10_000;
      rx.delayFirst = 2;
      await slow.nube.deps.events.emit({ event: 'file.created', ownerId: owner, data: { id: 'slow' } });
      const failed = await until(() => call('GET', `/webhooks/${w.id}`), (h) => h.failureCount >= 2, 60_000);
      expect(failed.failureCount).toBeGreaterThanOrEqual(2);
      expect(failed.lastError).toMatch(/timeout/);
      const d = (await call('GET', `/webhooks/${w.id}/deliveries`)).items[0];
      expect(d.attempts[0]).toMatchObject({ statusCode: null, error: expect.stringMatching(/timeout/) });
      const ok = await until(() => call('GET', `/webhooks/${w.id}/deliveries`), (l) => l.items[0].status === 'succeeded', 60_000);
      expect(ok.items[0].status).toBe('succeeded');
      expect(await call('GET', `/webhooks/${w.id}`)).toMatchObject({ status: 'ACTIVE', failureCount: 0 });
      const ids = new Set(rx.got.map((g) => g.headers['x-service-delivery']));
      expect(ids).toEqual(new Set([d.id]));
    } finally {
      await slow.close();
    }
  }, 120_000);

  it('marks a delivery failed when a short schedule runs out before the pause threshold', async () => {
    const short = await startNube({ dialect, env: { ...FAST, NUBE_WEBHOOK_RETRY_SCHEDULE: '100ms,100ms' } });
    try {
      const r = await fetch(`${short.baseUrl}/api/v2/webhooks`, {
        method: 'POST',
        headers: { ...short.auth, 'content-type': 'application/json' },
        body: JSON.stringify({ url: rx.url, events: ['file.created'] }),
      });
      const w = await json(r);
      const owner = (await json(await fetch(`${short.baseUrl}/api/v2/account`, { headers: short.auth }))).id;
      rx.status = 503;
      await short.nube.deps.events.emit({ event: 'file.created', ownerId: owner, data: { id: 'doomed' } });
      const get = async () =>
        json(await fetch(`${short.baseUrl}/api/v2/webhooks/${w.id}/deliveries`, { headers: short.auth }));
      const list = await until(get, (l) => l.items[0]?.status === 'failed');
      expect(list.items[0]).toMatchObject({ status: 'failed', attemptCount: 3, nextAttemptAt: null, lastStatusCode: 503 });
      await sleep(300);
      expect(rx.got).toHaveLength(3);
      const hookNow = await json(await fetch(`${short.baseUrl}/api/v2/webhooks/${w.id}`, { headers: short.auth }));
      expect(hookNow).toMatchObject({ status: 'ACTIVE', failureCount: 3 });
    } finally {
      await short.close();
    }
  });

  it('lists deliveries newest first with cursor pagination, and redelivers a succeeded one with the same id', async () => {
    const w = await hook();
    for (let i = 0; i < 5; i++) await publish('file.created', { n: i });
    await rx.waitFor(5);
    const all = await until(() => deliveries(w.id), (l) => l.items.every((d: { status: string }) => d.status === 'succeeded'));
    expect(all.items.map((d: { status: string }) => d.status)).toEqual(Array(5).fill('succeeded'));
    const p1 = await deliveries(w.id, '?limit=2');
    expect(p1.items).toHaveLength(2);
    expect(p1.hasMore).toBe(true);
    const p2 = await deliveries(w.id, `?limit=2&cursor=${p1.nextCursor}`);
    const p3 = await deliveries(w.id, `?limit=2&cursor=${p2.nextCursor}`);
    expect(p3).toMatchObject({ hasMore: false, nextCursor: null });
    const paged = [...p1.items, ...p2.items, ...p3.items].map((d: { id: string }) => d.id);
    expect(paged).toEqual(all.items.map((d: { id: string }) => d.id));
    expect([...paged].sort().reverse()).toEqual(paged);
    expect((await deliveries(w.id, '?status=failed')).items).toEqual([]);

    const target = p3.items[0];
    const re = await api('POST', `/webhooks/${w.id}/deliveries/${target.id}/redeliver`);
    expect(re.status).toBe(200);
    const got = await rx.waitFor(6);
    expect(got[5]!.headers['x-service-delivery']).toBe(target.id);
    expect(got[5]!.headers['x-service-attempt']).toBe('2');
    const after = await until(() => deliveries(w.id, '?limit=100'), (l) => l.items.find((d: { id: string }) => d.id === target.id).attemptCount === 2);
    expect(after.items.find((d: { id: string }) => d.id === target.id)).toMatchObject({ status: 'succeeded', attemptCount: 2 });
  });

  it('stops delivering once a webhook is deleted or paused by hand', async () => {
    const w = await hook();
    rx.status = 500;
    await publish('file.created', { id: 'x' });
    await rx.waitFor(1);
    const p = await api('PATCH', `/webhooks/${w.id}`, { status: 'PAUSED' });
    expect(p.body.status).toBe('PAUSED');
    await sleep(800);
    const n = rx.got.length;
    expect(n).toBeLessThanOrEqual(2); // at most the attempt that was already in flight
    const l = await deliveries(w.id);
    expect(l.items[0].status).toBe('skipped');
    await api('DELETE', `/webhooks/${w.id}`);
    await publish('file.created', { id: 'y' });
    await sleep(300);
    expect(rx.got.length).toBe(n);
  });
});
