import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { json, newOwnerKey, startNube } from '../helpers/server.js';
import { FAST, until, verify } from './helpers.js';
import { startReceiver } from './receiver.js';

describe.each(DIALECTS)('webhook delivery across a restart (%s)', (dialect) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'nube-wh-restart-'));
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('delivers a pending retry after nube restarts on the same data, with the same delivery id', async () => {
    const pg = dialect === 'postgres' ? await createTempDatabase('whrestart') : undefined;
    if (pg) cleanup.push(pg.drop);
    const env = {
      ...FAST,
      // The first retry waits long enough for the server to be stopped while it is pending.
      NUBE_WEBHOOK_RETRY_SCHEDULE: '1500ms,150ms,150ms',
      NUBE_OWNER_KEY: newOwnerKey(),
      ...(pg ? { DATABASE_URL: pg.url } : {}),
    };
    // The receiver is down at first: the first attempt fails to connect.
    const probe = await startReceiver();
    const port = probe.port;
    await probe.close();

    const first = await startNube({ dataDir, env });
    const created = await fetch(`${first.baseUrl}/api/v2/webhooks`, {
      method: 'POST',
      headers: { ...first.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://127.0.0.1:${port}/hook/restart`, events: ['file.created'] }),
    });
    const w = await json(created);
    const owner = (await json(await fetch(`${first.baseUrl}/api/v2/account`, { headers: first.auth }))).id;
    await first.nube.deps.events.emit({ event: 'file.created', ownerId: owner, data: { id: 'survivor' } });
    const listFirst = async () =>
      json(await fetch(`${first.baseUrl}/api/v2/webhooks/${w.id}/deliveries`, { headers: first.auth }));
    const pending = await until(listFirst, (l) => l.items[0]?.attemptCount === 1);
    expect(pending.items[0]).toMatchObject({ status: 'pending', attemptCount: 1, lastStatusCode: null });
    expect(pending.items[0].lastError).toMatch(/ECONNREFUSED/);
    const deliveryId = pending.items[0].id;
    await first.close();

    const rx = await startReceiver(port, '/hook/restart');
    cleanup.push(() => rx.close());
    const second = await startNube({ dataDir, env });
    cleanup.push(() => second.close());
    const [got] = await rx.waitFor(1, 10_000);
    expect(got!.headers['x-service-delivery']).toBe(deliveryId);
    expect(got!.headers['x-service-attempt']).toBe('2');
    expect(JSON.parse(got!.raw)).toMatchObject({ event: 'file.created', data: { id: 'survivor' } });
    // The secret sealed by the first process still signs in the second.
    expect(verify(w.secret, got!.raw, got!.headers['x-service-signature'])).toBe(true);
    const listSecond = async () =>
      json(await fetch(`${second.baseUrl}/api/v2/webhooks/${w.id}/deliveries`, { headers: second.auth }));
    const done = await until(listSecond, (l) => l.items[0]?.status === 'succeeded');
    expect(done.items[0]).toMatchObject({ id: deliveryId, status: 'succeeded', attemptCount: 2, lastStatusCode: 200 });
    expect(rx.got).toHaveLength(1);
  });
});
