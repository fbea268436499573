import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import { DatabaseEngineError } from './errors.js';

const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
/** The engine's time limit here: a query held behind a runaway would wait about this long. */
const LIMIT_MS = 3000;

let dir: string;
let engine: EmbeddedDatabaseEngine;
beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'nube-iso-'));
  engine = new EmbeddedDatabaseEngine({ dir, workers: 2, timeoutMs: LIMIT_MS });
  for (const id of ['a', 'b']) {
    await engine.create(id);
    await engine.query(id, { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)' });
    await engine.query(id, { sql: "INSERT INTO t VALUES (1, 'one')" });
  }
});
afterAll(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('isolation between databases', () => {
  it('stops a runaway query with QueryTimeout while another database answers meanwhile', async () => {
    const started = performance.now();
    let settled = false;
    const runaway = engine.query('a', { sql: RUNAWAY }).then(
      () => null,
      (e: unknown) => e,
    );
    void runaway.finally(() => {
      settled = true;
    });
    await new Promise((r) => setTimeout(r, 100));
    const lat: number[] = [];
    while (!settled) {
      const t = performance.now();
      const r = await engine.query('b', { sql: 'SELECT v FROM t WHERE id = ?', args: [1] });
      lat.push(performance.now() - t);
      expect(r.rows).toEqual([['one']]);
    }
    const err = await runaway;
    expect(err).toBeInstanceOf(DatabaseEngineError);
    expect((err as DatabaseEngineError).code).toBe('QueryTimeout');
    const elapsed = performance.now() - started;
    // Stopped at its limit, not before; the upper bound only says the limit fired (a busy machine is slow).
    expect(elapsed).toBeGreaterThanOrEqual(LIMIT_MS - 100);
    expect(elapsed).toBeLessThan(60_000);
    // The other database kept answering, none of its queries held behind the runaway. How fast is for
    // bench/databases (point queries on B while A runs a 5 s query: p99 < 10 ms there).
    expect(lat.length).toBeGreaterThanOrEqual(5);
    expect(Math.max(...lat)).toBeLessThan(LIMIT_MS * 0.8);
    // The database that ran away is usable again.
    expect((await engine.query('a', { sql: 'SELECT v FROM t' })).rows).toEqual([['one']]);
  }, 120_000);

  it('a killed write leaves nothing behind', async () => {
    const err = await engine.batch('a', [{ sql: "INSERT INTO t VALUES (2, 'two')" }, { sql: RUNAWAY }]).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as DatabaseEngineError).code).toBe('QueryTimeout');
    expect((await engine.query('a', { sql: 'SELECT count(*) FROM t' })).rows).toEqual([[1]]);
  });

  it('runaways on every executor do not block another database', async () => {
    // Long enough that a third executor starting on a busy machine still answers before the runaways end.
    const slow = new EmbeddedDatabaseEngine({ dir, workers: 2, timeoutMs: 20_000 });
    try {
      await slow.query('c', { sql: 'SELECT 1' }).catch(() => undefined);
      await slow.create('c');
      const done: string[] = [];
      const r1 = slow
        .query('a', { sql: RUNAWAY })
        .catch((e: unknown) => done.push((e as DatabaseEngineError).code));
      const r2 = slow
        .query('b', { sql: RUNAWAY })
        .catch((e: unknown) => done.push((e as DatabaseEngineError).code));
      await new Promise((r) => setTimeout(r, 50));
      // Both executors are busy: a third one is started (slow under tsx while two cores spin).
      expect((await slow.query('c', { sql: 'SELECT 42' })).rows).toEqual([[42]]);
      expect(done).toEqual([]);
      await Promise.all([r1, r2]);
      expect(done).toEqual(['QueryTimeout', 'QueryTimeout']);
    } finally {
      await slow.close();
    }
  }, 120_000);

  it('requests on one database run in order', async () => {
    await engine.query('b', { sql: 'CREATE TABLE seq(n INTEGER PRIMARY KEY AUTOINCREMENT, k INT)' });
    await Promise.all(
      Array.from({ length: 50 }, (_, k) =>
        engine.query('b', { sql: 'INSERT INTO seq(k) VALUES (?)', args: [k] }),
      ),
    );
    const r = await engine.query('b', { sql: 'SELECT k FROM seq ORDER BY n' });
    expect(r.rows.map((row) => row[0])).toEqual(Array.from({ length: 50 }, (_, k) => k));
  });
});
