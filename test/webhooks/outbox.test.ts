// The outbox (src/platform/outbox.ts) as the webhooks area drains it: an event exists exactly when the
// transaction that recorded it committed, rows left without a drainer are delivered by the next start,
// and two replicas draining the same store fan each event out once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { json, newOwnerKey, startNube, type TestNube } from '../helpers/server.js';
import { deliveredOncePerEvent } from './bodies.js';
import { FAST, until } from './helpers.js';
import { startReceiver } from './receiver.js';

const bodies = (got: { raw: string }[]) => got.map((g) => JSON.parse(g.raw) as { event: string; data: { id: string } });

describe.each(DIALECTS)('event outbox (%s)', (dialect) => {
  const cleanup: (() => unknown)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  /** A data dir (and PostgreSQL database) that several nubes open in turn or side by side. */
  async function shared() {
    const dataDir = mkdtempSync(join(tmpdir(), 'nube-outbox-'));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const pg = dialect === 'postgres' ? await createTempDatabase('outbox') : undefined;
    if (pg) cleanup.push(pg.drop);
    const env = { ...FAST, NUBE_OWNER_KEY: newOwnerKey(), ...(pg ? { DATABASE_URL: pg.url } : {}) };
    const start = async (listen = true) => {
      const t = await startNube({ dataDir, env, listen });
      cleanup.push(() => t.close());
      return t;
    };
    return { start };
  }

  async function subscribe(t: TestNube, url: string) {
    const r = await fetch(`${t.baseUrl}/api/v2/webhooks`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url, events: ['file.created', 'database.created'] }),
    });
    expect(r.status).toBe(201);
    const owner = (await json(await fetch(`${t.baseUrl}/api/v2/account`, { headers: t.auth }))).id as string;
    return { hook: (await json(r)).id as string, owner };
  }

  it('records an event only when its transaction commits, and delivers it once', async () => {
    const rx = await startReceiver();
    cleanup.push(() => rx.close());
    const t = await (await shared()).start();
    const { owner } = await subscribe(t, rx.url);
    const events = t.nube.deps.events;
    await expect(
      events.atomically(async (_trx, emit) => {
        emit({ event: 'file.created', ownerId: owner, data: { id: 'rolled-back' } });
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');
    await events.atomically(async (_trx, emit) => {
      emit({ event: 'file.created', ownerId: owner, data: { id: 'committed' } });
    });
    await rx.waitFor(1);
    await until(() => events.backlog(), (n) => n === 0);
    expect(bodies(rx.got).map((b) => b.data.id)).toEqual(['committed']);
  });

  it('delivers events recorded while no replica drained once one starts (the sweep at start)', async () => {
    const rx = await startReceiver();
    cleanup.push(() => rx.close());
    const s = await shared();
    // No listen: this process serves nothing and drains nothing, like a replica that died at each commit.
    const api = await s.start(false);
    const worker = await s.start();
    const { owner: ownerId } = await subscribe(worker, rx.url);
    await worker.close();
    for (let i = 0; i < 5; i++) await api.nube.deps.events.emit({ event: 'file.created', ownerId, data: { id: `early-${i}` } });
    expect(await api.nube.deps.events.backlog()).toBe(5);
    await s.start();
    await rx.waitFor(5);
    expect(new Set(bodies(rx.got).map((b) => b.data.id))).toEqual(new Set([0, 1, 2, 3, 4].map((i) => `early-${i}`)));
  });

  // Replicas share PostgreSQL; the embedded SQLite file belongs to one process.
  it.runIf(dialect === 'postgres')('fans each event out once while two replicas drain the same store', async () => {
    const rx = await startReceiver();
    cleanup.push(() => rx.close());
    const s = await shared();
    const a = await s.start();
    const b = await s.start();
    const { hook, owner } = await subscribe(a, rx.url);
    const N = 200;
    await Promise.all(
      Array.from({ length: N }, (_, i) =>
        (i % 2 ? a : b).nube.deps.events.emit({ event: 'file.created', ownerId: owner, data: { id: `twice-${i}` } }),
      ),
    );
    await deliveredOncePerEvent(a, rx, { id: hook }, Array.from({ length: N }, (_, i) => `twice-${i}`));
  });

  it('still delivers events published on the bus by sources not yet moved to the outbox', async () => {
    const rx = await startReceiver();
    cleanup.push(() => rx.close());
    const t = await (await shared()).start();
    const { owner } = await subscribe(t, rx.url);
    await t.nube.deps.bus.publish({ event: 'database.created', ownerId: owner, data: { id: 'via-bus' } });
    await rx.waitFor(1);
    expect(bodies(rx.got)).toMatchObject([{ event: 'database.created', data: { id: 'via-bus' } }]);
  });
});
