import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmbeddedDatabaseEngine } from '../../src/areas/databases/engine/index.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// The executor pool shared between accounts, through HTTP: one executor, two requests of queue per
// account. The store plays no part here (the engine's files), so this runs on SQLite only.

async function until(cond: () => boolean): Promise<void> {
  const end = Date.now() + 30_000;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  expect(cond()).toBe(true);
}

describe('database executors shared fairly between accounts', () => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let otherKey: string;

  beforeAll(async () => {
    t = await startNube({
      env: {
        NUBE_DATABASE_EXECUTORS_MIN: '1',
        NUBE_DATABASE_EXECUTORS_MAX: '1',
        NUBE_DATABASE_QUEUE_PER_OWNER: '2',
      },
    });
    call = caller(t);
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
  });
  afterAll(() => t?.close());

  it("answers 429 DatabaseQueueFull past an account's queue, and serves another account before that backlog", async () => {
    const mk = async (name: string, key?: string) =>
      (await json(await call('POST', '/databases', { name }, key))).id as string;
    const [a1, a2, b] = [await mk('a1'), await mk('a2'), await mk('b', otherKey)];
    const order: string[] = [];
    const q = (name: string, id: string, sql: string, key?: string) =>
      call('POST', `/databases/${id}/query`, { sql }, key).then(async (r) => {
        order.push(name);
        return { status: r.status, headers: r.headers, body: await json(r) };
      });
    const runaway = q(
      'runaway',
      a1,
      'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c',
    );
    const pool = () => (t.nube.services.databases.engine as EmbeddedDatabaseEngine).poolStats;
    await until(() => pool().busy === 1);
    // One after the other, so their order on the database's lane is known.
    const queued = [q('a-1', a2, 'SELECT 1')];
    await until(() => pool().queued === 1);
    queued.push(q('a-2', a2, 'SELECT 2'));
    await until(() => pool().queued === 2);
    const refused = await q('a-3', a2, 'SELECT 3');
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('DatabaseQueueFull');
    expect(refused.body.error).toMatch(/waiting for an executor/);
    expect(refused.headers.get('retry-after')).toBe('1');
    const other = q('b', b, 'SELECT 42', otherKey);
    const r = await runaway;
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('QueryTimeout');
    expect((await other).body.rows).toEqual([[42]]);
    expect((await Promise.all(queued)).map((x) => x.body.rows)).toEqual([[[1]], [[2]]]);
    // The other account asked last but got the executor first once the runaway was stopped.
    expect(order).toEqual(['a-3', 'runaway', 'b', 'a-1', 'a-2']);
  }, 120_000);
});
