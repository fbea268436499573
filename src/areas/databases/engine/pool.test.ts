import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbFile } from './db-id.js';
import { DatabaseEngineError } from './errors.js';
import { encodeFrame, FrameReader } from './framing.js';
import { ExecutorPool, PIPELINE_DEPTH } from './pool.js';
import type { ExecutorSettings } from './protocol.js';
import type { QueryResult } from './schemas.js';

// The executor channel: length-prefixed frames, pipelining of one database's requests to
// one executor, and what happens to a pipeline when its executor dies.

const SETTINGS: ExecutorSettings = {
  synchronous: 'full',
  maxDatabaseBytes: 1024 ** 3,
  maxResultRows: 50_000,
  maxResultBytes: 16 * 1024 ** 2,
  maxValueBytes: 16 * 1024 ** 2,
  busyTimeoutMs: 5000,
  maxOpenConnections: 64,
};
// About 0.3-1 s of one core: long enough to kill the executor while it runs.
const SLOW =
  'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'nube-pool-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function withPool(size: number, timeoutMs: number) {
  const pool = new ExecutorPool({ size, maxSize: size, settings: SETTINGS });
  const q = (db: string, sql: string, args?: unknown[]) =>
    pool.run<QueryResult>(
      { op: 'query', db, path: dbFile(dir, db), req: { sql, args: args as never } },
      timeoutMs,
      db,
    );
  const create = (db: string) => pool.run({ op: 'create', db, path: dbFile(dir, db) }, timeoutMs, null);
  return { pool, q, create };
}

async function settled<T>(ps: Promise<T>[]) {
  return Promise.all(
    ps.map((p) =>
      p.then(
        (value) => ({ ok: true as const, value }),
        (error: unknown) => ({ ok: false as const, error: error as DatabaseEngineError }),
      ),
    ),
  );
}

describe('framing', () => {
  it('splits frames however the bytes are chunked, including large ones', () => {
    const msgs = [{ a: 1 }, { s: 'é'.repeat(100_000) }, { b: [1, 2, 3] }, 'x'];
    const bytes = Buffer.concat(msgs.map(encodeFrame));
    for (const size of [1, 3, 7, 4096, bytes.length]) {
      const got: unknown[] = [];
      const reader = new FrameReader((json) => got.push(JSON.parse(json)));
      for (let i = 0; i < bytes.length; i += size) reader.push(bytes.subarray(i, i + size));
      expect(got).toEqual(msgs);
    }
  });
});

describe('pipelining', () => {
  it('answers many concurrent requests on one database in order, each with its own result', async () => {
    const { pool, q, create } = withPool(2, 10_000);
    try {
      await create('p1');
      await q('p1', 'CREATE TABLE t(n INTEGER PRIMARY KEY AUTOINCREMENT, k INT)');
      const n = PIPELINE_DEPTH * 4;
      const writes = Array.from({ length: n }, (_, k) => q('p1', 'INSERT INTO t(k) VALUES (?)', [k]));
      const reads = Array.from({ length: n }, (_, k) => q('p1', 'SELECT ? AS k, ? AS s', [k, `v${k}`]));
      const [w, r] = await Promise.all([Promise.all(writes), Promise.all(reads)]);
      expect(w.map((x) => x.lastInsertRowid)).toEqual(Array.from({ length: n }, (_, k) => String(k + 1)));
      expect(r.map((x) => x.rows[0])).toEqual(Array.from({ length: n }, (_, k) => [k, `v${k}`]));
      const all = await q('p1', 'SELECT k FROM t ORDER BY n');
      expect(all.rows.map((row) => row[0])).toEqual(Array.from({ length: n }, (_, k) => k));
    } finally {
      await pool.close();
    }
  });

  it('carries multi-megabyte requests and answers through the channel, pipelined with small ones', async () => {
    const { pool, q, create } = withPool(1, 30_000);
    try {
      await create('big');
      await q('big', 'CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT)');
      const rows = Array.from({ length: 2000 }, (_, i) => [i, `${i}:${'x'.repeat(1500)}`]);
      const imported = pool.run<{ imported: number }>(
        { op: 'import', db: 'big', path: dbFile(dir, 'big'), req: { table: 't', columns: ['id', 's'], rows } },
        30_000,
        'big',
      );
      const small = q('big', 'SELECT count(*) FROM t');
      const all = q('big', 'SELECT id, s FROM t ORDER BY id');
      const after = q('big', 'SELECT ?', ['after']);
      expect((await imported).imported).toBe(2000);
      expect((await small).rows).toEqual([[2000]]);
      expect((await all).rows).toEqual(rows);
      expect((await after).rows).toEqual([['after']]);
    } finally {
      await pool.close();
    }
  });

  it('an executor crash mid-pipeline answers every pending request: the running one fails, the rest run', async () => {
    const { pool, q, create } = withPool(1, 10_000);
    try {
      await create('p2');
      await q('p2', 'CREATE TABLE t(n INTEGER PRIMARY KEY, k INT)');
      const before = Array.from({ length: 5 }, (_, k) => q('p2', 'INSERT INTO t VALUES (?, ?)', [k, k]));
      const slow = q('p2', SLOW);
      const after = Array.from({ length: 20 }, (_, k) => q('p2', 'INSERT INTO t VALUES (?, ?)', [100 + k, k]));
      await Promise.all(before);
      const [pid] = pool.pids;
      await new Promise((r) => setTimeout(r, 50));
      process.kill(pid as number, 'SIGKILL');
      const [s, ...rest] = await settled([slow, ...after]);
      expect(s?.ok).toBe(false);
      expect(s?.ok === false && s.error.code).toBe('EngineWorkerCrashed');
      expect(rest.every((x) => x.ok)).toBe(true);
      const count = await q('p2', 'SELECT count(*) FROM t');
      expect(count.rows).toEqual([[25]]);
      expect(pool.pids).not.toContain(pid);
    } finally {
      await pool.close();
    }
  }, 20_000);

  it('a timeout mid-pipeline fails only the runaway; requests queued behind it run afterwards', async () => {
    const { pool, q, create } = withPool(1, 400);
    try {
      await create('p3');
      const runaway = q('p3', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c');
      const behind = Array.from({ length: 10 }, (_, k) => q('p3', 'SELECT ?', [k]));
      const [r, ...rest] = await settled([runaway, ...behind]);
      expect(r?.ok === false && r.error.code).toBe('QueryTimeout');
      expect(rest.map((x) => x.ok && x.value.rows[0]?.[0])).toEqual(Array.from({ length: 10 }, (_, k) => k));
    } finally {
      await pool.close();
    }
  }, 20_000);

  it('closing the pool answers everything in flight and queued with an error, never a hang', async () => {
    const { pool, q, create } = withPool(1, 10_000);
    await create('p4');
    const slow = q('p4', SLOW);
    const behind = Array.from({ length: PIPELINE_DEPTH + 10 }, (_, k) => q('p4', 'SELECT ?', [k]));
    const outcomes = settled([slow, ...behind]);
    await new Promise((r) => setTimeout(r, 30));
    await pool.close();
    const all = await outcomes;
    for (const x of all) {
      if (!x.ok) expect(x.error).toBeInstanceOf(DatabaseEngineError);
    }
    expect(all.filter((x) => !x.ok).length).toBeGreaterThan(0);
  });
});

describe('closed connections', () => {
  it("give back their file descriptors: an executor serving many short-lived connections stays far below its open files limit", async () => {
    const { pool, q, create } = withPool(1, 10_000);
    try {
      const [pid] = pool.pids;
      const fds = () => readdirSync(`/proc/${pid}/fd`).length;
      await create('fd0');
      await q('fd0', 'CREATE TABLE t(x)');
      const before = fds();
      // Each round opens a connection (a query's statements stay cached on it) and closes it, as
      // every libSQL stream with a connection of its own does. Each leaked one kept two descriptors.
      for (let k = 0; k < 300; k++) {
        await q('fd0', 'INSERT INTO t VALUES (?)', [k]);
        await q('fd0', 'SELECT count(*) FROM t');
        await pool.closeEverywhere('fd0');
      }
      await q('fd0', 'SELECT 1');
      expect(fds() - before).toBeLessThan(40);
    } finally {
      await pool.close();
    }
  });
});
