import { mkdtempSync, rmSync } from 'node:fs';
import { getPriority, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import type { DatabaseEngineError } from './errors.js';

// Fairness between owners (issue 9, item 3): one owner's runaway queries hold its share of the
// executors until their time limit, never the whole pool; its backlog waits in its own bounded
// queue; the pool goes back to its minimum when idle. Latency figures are for bench/databases;
// these bounds only tell "answered meanwhile" from "held until a runaway's time limit".

const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';

/** About 1-3 s of one core here: long enough for the pool to grow while they run. */
const SLOW =
  'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 6000000) SELECT count(*) FROM c';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'nube-fair-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const code = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: unknown) => (e as DatabaseEngineError).code,
  );

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (!cond() && performance.now() < end) await new Promise((r) => setTimeout(r, 50));
}

describe('fair executor pool', () => {
  it("answers owner B promptly while owner A runs 12 runaway queries, and ends A's with its time limit", async () => {
    const LIMIT_MS = 4000;
    // Production shape on this machine: 3 executors at least, 6 at most, 2 per owner.
    const engine = new EmbeddedDatabaseEngine({ dir: path.join(dir, 'twelve'), workers: 3, timeoutMs: LIMIT_MS });
    try {
      const A = Array.from({ length: 12 }, (_, i) => `a${i}`);
      for (const id of [...A, 'b']) await engine.create(id);
      await engine.query('b', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)' }, { owner: 'B' });
      await engine.query('b', { sql: "INSERT INTO t VALUES (1, 'one')" }, { owner: 'B' });
      const runaways = A.map((id) => code(engine.query(id, { sql: RUNAWAY }, { owner: 'A' })));
      await new Promise((r) => setTimeout(r, 300));
      const lat: number[] = [];
      let peak = 0;
      let queuedLeast = Number.POSITIVE_INFINITY;
      const t0 = performance.now();
      // About the first round of A's runaways (their limit), sampled by B's point queries.
      while (performance.now() - t0 < LIMIT_MS * 0.75) {
        const t = performance.now();
        const r = await engine.query('b', { sql: 'SELECT v FROM t WHERE id = ?', args: [1] }, { owner: 'B' });
        lat.push(performance.now() - t);
        expect(r.rows).toEqual([['one']]);
        peak = Math.max(peak, engine.poolStats.executors);
        queuedLeast = Math.min(queuedLeast, engine.poolStats.queued);
      }
      expect(lat.length).toBeGreaterThanOrEqual(5);
      // Held behind a runaway, a query would wait most of LIMIT_MS.
      expect(Math.max(...lat)).toBeLessThan(LIMIT_MS / 2);
      expect(peak).toBeLessThanOrEqual(6);
      // A's backlog waited in its own queue meanwhile (2 running, the rest queued).
      expect(queuedLeast).toBeGreaterThanOrEqual(6);
      // The existing per-query limit still ends every one of A's runaways.
      expect(await Promise.all(runaways)).toEqual(A.map(() => 'QueryTimeout'));
      expect(engine.poolStats.queued).toBe(0);
    } finally {
      await engine.close();
    }
  }, 180_000);

  it("bounds one owner's queue (QueueFull) and serves another owner before that backlog", async () => {
    const engine = new EmbeddedDatabaseEngine({
      dir: path.join(dir, 'queue'),
      workers: 1,
      maxWorkers: 1,
      maxQueuedPerOwner: 5,
      timeoutMs: 1500,
    });
    try {
      for (const id of ['q0', 'q1', 'q2', 'qb']) await engine.create(id);
      const order: string[] = [];
      const tag = (name: string, p: Promise<unknown>) =>
        code(p).then((c) => {
          order.push(name);
          return c;
        });
      const runaway = tag('runaway', engine.query('q0', { sql: RUNAWAY }, { owner: 'A' }));
      await until(() => engine.poolStats.busy === 1, 10_000);
      // Five wait (on two databases), the rest are refused at once.
      const backlog = Array.from({ length: 8 }, (_, i) =>
        tag(`a${i}`, engine.query(i % 2 ? 'q1' : 'q2', { sql: 'SELECT ?', args: [i] }, { owner: 'A' })),
      );
      const b = tag('b', engine.query('qb', { sql: 'SELECT 1' }, { owner: 'B' }));
      expect(await runaway).toBe('QueryTimeout');
      const answers = await Promise.all(backlog);
      expect(answers.filter((c) => c === 'QueueFull')).toHaveLength(3);
      expect(answers.filter((c) => c === 'ok')).toHaveLength(5);
      expect(await b).toBe('ok');
      // B arrived after A's backlog but got the executor as soon as it was free.
      expect(order.filter((n) => !/^a[567]$/.test(n)).slice(0, 2)).toEqual(['runaway', 'b']);
      expect(engine.poolStats.queued).toBe(0);
    } finally {
      await engine.close();
    }
  }, 120_000);

  it('answers a request that waited its allowance for an executor with QueueTimeout, never running it', async () => {
    const engine = new EmbeddedDatabaseEngine({
      dir: path.join(dir, 'wait'),
      workers: 1,
      maxWorkers: 1,
      maxQueueWaitMs: 500,
      timeoutMs: 4000,
    });
    try {
      for (const id of ['w0', 'w1']) await engine.create(id);
      await engine.query('w1', { sql: 'CREATE TABLE t(n INT)' });
      const runaway = code(engine.query('w0', { sql: RUNAWAY }, { owner: 'A' }));
      await until(() => engine.poolStats.busy === 1, 10_000);
      const t0 = performance.now();
      // The first waits as the head of its lane, the second behind it in the lane.
      const waited = [
        code(engine.query('w1', { sql: 'INSERT INTO t VALUES (1)' }, { owner: 'A' })),
        code(engine.query('w1', { sql: 'INSERT INTO t VALUES (2)' }, { owner: 'A' })),
      ];
      expect(await Promise.all(waited)).toEqual(['QueueTimeout', 'QueueTimeout']);
      // Answered well before the runaway's limit freed the executor.
      expect(performance.now() - t0).toBeLessThan(3500);
      expect(engine.poolStats.queued).toBe(0);
      expect(await runaway).toBe('QueryTimeout');
      // Neither ran, and the lane goes on.
      expect((await engine.query('w1', { sql: 'SELECT count(*) FROM t' })).rows).toEqual([[0]]);
    } finally {
      await engine.close();
    }
  }, 120_000);

  it('shrinks back to its minimum once the extra executors have been idle', async () => {
    const engine = new EmbeddedDatabaseEngine({
      dir: path.join(dir, 'shrink'),
      workers: 2,
      maxWorkers: 5,
      maxWorkersPerOwner: 5,
      idleMs: 500,
      timeoutMs: 60_000,
    });
    try {
      const ids = ['s0', 's1', 's2', 's3', 's4'];
      for (const id of ids) await engine.create(id);
      // Bounded, unlike RUNAWAY: executors killed for their time limit would leave the pool anyway.
      const runs = ids.map((id) => code(engine.query(id, { sql: SLOW })));
      await until(() => engine.poolStats.executors >= 4, 60_000);
      const grown = engine.executorPids;
      expect(grown.length).toBeGreaterThan(2);
      expect(await Promise.all(runs)).toEqual(ids.map(() => 'ok'));
      await until(() => engine.poolStats.executors === 2, 30_000);
      expect(engine.poolStats.executors).toBe(2);
      const kept = new Set(engine.executorPids);
      await until(() => grown.every((pid) => kept.has(pid) || !alive(pid)), 10_000);
      expect(grown.filter((pid) => !kept.has(pid) && alive(pid))).toEqual([]);
      // And it still answers, growing again when needed.
      expect((await engine.query('s0', { sql: 'SELECT 7' })).rows).toEqual([[7]]);
    } finally {
      await engine.close();
    }
  }, 180_000);

  it('lowers the CPU priority of an executor running a long request, and restores it when the request ends', async () => {
    const engine = new EmbeddedDatabaseEngine({ dir: path.join(dir, 'nice'), workers: 2, timeoutMs: 60_000 });
    try {
      await engine.create('n0');
      const run = code(engine.query('n0', { sql: SLOW }));
      const base = getPriority();
      const niced = () => engine.executorPids.filter((pid) => getPriority(pid) === Math.min(19, base + 10));
      await until(() => niced().length === 1, 10_000);
      expect(niced()).toHaveLength(1);
      expect(await run).toBe('ok');
      // Raising it back needs CAP_SYS_NICE; without it the pool prefers the other executors instead.
      if (process.getuid?.() === 0) expect(engine.executorPids.map((pid) => getPriority(pid))).toEqual([base, base]);
      const quick = await engine.query('n0', { sql: 'SELECT 1' });
      expect(quick.rows).toEqual([[1]]);
    } finally {
      await engine.close();
    }
  }, 120_000);
});
