import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DatabaseSync } from '@photostructure/sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import { DatabaseEngineError } from './errors.js';
import { databaseQueryBodySchema, queryResultSchema } from './schemas.js';

let dir: string;
let engine: EmbeddedDatabaseEngine;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'nube-dbe-'));
  engine = new EmbeddedDatabaseEngine({ dir, workers: 2 });
});
afterAll(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

async function fails(p: Promise<unknown>): Promise<DatabaseEngineError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DatabaseEngineError);
  return err as DatabaseEngineError;
}

describe('values and results', () => {
  it('encodes integers beyond 2^53, reals, text, NULL and blobs exactly', async () => {
    await engine.create('enc');
    const r = await engine.query('enc', {
      sql: `SELECT 9223372036854775807, -9223372036854775808, 9007199254740993, 9007199254740991,
              0.1, 1e308, 'héllo', NULL, x'00ff10', 1e999, -1e999, 2.0`,
    });
    expect(queryResultSchema.parse(r)).toEqual(r);
    expect(r.rows).toEqual([
      [
        { integer: '9223372036854775807' },
        { integer: '-9223372036854775808' },
        { integer: '9007199254740993' },
        9007199254740991,
        0.1,
        1e308,
        'héllo',
        null,
        { base64: 'AP8Q' },
        { real: 'Infinity' },
        { real: '-Infinity' },
        2,
      ],
    ]);
    expect(JSON.parse(JSON.stringify(r))).toEqual(r);
  });

  it('binds positional and named args with the same encoding, round trip exact', async () => {
    await engine.create('args');
    await engine.query('args', {
      sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, i INT, r REAL, s TEXT, b BLOB)',
    });
    const ins = await engine.query('args', {
      sql: 'INSERT INTO t(i, r, s, b) VALUES (?, ?, ?, ?)',
      args: [{ integer: '-9223372036854775807' }, 1.5, 'x', { base64: 'AQID' }],
    });
    expect(ins).toMatchObject({ rowsAffected: 1, lastInsertRowid: '1', rowsWritten: 1, columns: [] });
    await engine.query('args', {
      sql: 'INSERT INTO t(i, r, s, b) VALUES (:i, @r, $s, :b)',
      args: { i: 7, r: { real: 3 }, s: null, b: true },
    });
    const r = await engine.query('args', {
      sql: 'SELECT i, typeof(i), r, typeof(r), s, b FROM t ORDER BY id',
    });
    expect(r.columns).toEqual(['i', 'typeof(i)', 'r', 'typeof(r)', 's', 'b']);
    expect(r.columnTypes).toEqual(['INT', null, 'REAL', null, 'TEXT', 'BLOB']);
    expect(r.rows).toEqual([
      [{ integer: '-9223372036854775807' }, 'integer', 1.5, 'real', 'x', { base64: 'AQID' }],
      [7, 'integer', 3, 'real', null, 1],
    ]);
    expect(r.rowsRead).toBe(2);
    const named = await engine.query('args', { sql: 'SELECT ?2, ?1', args: ['a', 'b'] });
    expect(named.rows).toEqual([['b', 'a']]);
  });

  it('runs several statements in one sql text in one transaction', async () => {
    await engine.create('multi');
    const r = await engine.query('multi', {
      sql: `CREATE TABLE t(x); CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END;
            INSERT INTO t VALUES (1), (2); SELECT count(*) FROM t; -- done`,
    });
    expect(r.rows).toEqual([[2]]);
    expect(r.rowsWritten).toBe(2);
    await fails(engine.query('multi', { sql: 'INSERT INTO t VALUES (3); INSERT INTO nope VALUES (1)' }));
    expect((await engine.query('multi', { sql: 'SELECT count(*) FROM t' })).rows).toEqual([[2]]);
  });
});

describe('errors', () => {
  it('turns constraint violations into SQLite extended codes', async () => {
    await engine.create('err');
    await engine.query('err', { sql: 'CREATE TABLE u(id INTEGER PRIMARY KEY, v TEXT UNIQUE NOT NULL)' });
    await engine.query('err', { sql: "INSERT INTO u(v) VALUES ('a')" });
    const e1 = await fails(engine.query('err', { sql: "INSERT INTO u(v) VALUES ('a')" }));
    expect(e1.code).toBe('SQLITE_CONSTRAINT_UNIQUE');
    expect(e1.message).toBe('UNIQUE constraint failed: u.v');
    const e2 = await fails(engine.query('err', { sql: "INSERT INTO u(v) VALUES ('a') RETURNING id" }));
    expect(e2.code).toBe('SQLITE_CONSTRAINT_UNIQUE');
    expect((await fails(engine.query('err', { sql: 'INSERT INTO u(v) VALUES (NULL)' }))).code).toBe(
      'SQLITE_CONSTRAINT_NOTNULL',
    );
    const e3 = await fails(engine.query('err', { sql: 'SELEC 1' }));
    expect(e3).toMatchObject({ code: 'SQLITE_ERROR', message: 'near "SELEC": syntax error' });
    expect((await fails(engine.query('err', { sql: '-- nothing' }))).code).toBe('InvalidRequest');
    expect((await fails(engine.query('missing', { sql: 'SELECT 1' }))).code).toBe('DatabaseNotFound');
    expect(existsSync(path.join(dir, 'missing.sqlite'))).toBe(false);
    expect((await fails(engine.create('err'))).code).toBe('DatabaseExists');
  });

  it('caps result size', async () => {
    const small = new EmbeddedDatabaseEngine({ dir, workers: 1, maxResultRows: 100, maxResultBytes: 10_000 });
    try {
      await small.create('cap');
      const rows = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 101) SELECT x FROM c';
      expect((await fails(small.query('cap', { sql: rows }))).code).toBe('ResultTooLarge');
      const bytes = "SELECT printf('%.*c', 20000, 'x')";
      expect((await fails(small.query('cap', { sql: bytes }))).code).toBe('ResultTooLarge');
      expect((await small.query('cap', { sql: 'SELECT 1' })).rows).toEqual([[1]]);
    } finally {
      await small.close();
    }
  });

  it('caps database size with max_page_count', async () => {
    const tiny = new EmbeddedDatabaseEngine({
      dir: path.join(dir, 'tiny'),
      workers: 1,
      maxDatabaseBytes: 64 * 1024,
    });
    try {
      await tiny.create('full');
      await tiny.query('full', { sql: 'CREATE TABLE b(x)' });
      const e = await fails(tiny.query('full', { sql: 'INSERT INTO b SELECT randomblob(100000)' }));
      expect(e.code).toBe('DatabaseTooLarge');
      expect((await fails(tiny.query('full', { sql: 'PRAGMA max_page_count=100000' }))).code).toBe(
        'SQLITE_AUTH',
      );
    } finally {
      await tiny.close();
    }
  });
});

describe('batch and import', () => {
  it('batch is all or nothing', async () => {
    await engine.create('batch');
    const ok = await engine.batch('batch', [
      { sql: 'CREATE TABLE t(x INTEGER PRIMARY KEY)' },
      { sql: 'INSERT INTO t VALUES (?)', args: [1] },
      { sql: 'SELECT x FROM t' },
    ]);
    expect(ok.map((r) => r.rows)).toEqual([[], [], [[1]]]);
    const e = await fails(
      engine.batch('batch', [
        { sql: 'INSERT INTO t VALUES (2)' },
        { sql: 'CREATE TABLE t2(y)' },
        { sql: 'INSERT INTO t VALUES (1)' },
      ]),
    );
    expect(e).toMatchObject({ code: 'SQLITE_CONSTRAINT_PRIMARYKEY', statementIndex: 2 });
    const after = await engine.query('batch', {
      sql: "SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM sqlite_schema WHERE name='t2')",
    });
    expect(after.rows).toEqual([[1, 0]]);
  });

  it('imports with abort, ignore and replace', async () => {
    await engine.create('imp');
    await engine.query('imp', { sql: 'CREATE TABLE "we""ird"(id INTEGER PRIMARY KEY, "na me" TEXT)' });
    const base = { table: 'we"ird', columns: ['id', 'na me'] };
    expect(
      await engine.import('imp', {
        ...base,
        rows: [
          [1, 'a'],
          [2, 'b'],
        ],
      }),
    ).toEqual({ imported: 2, total: 2 });
    const e = await fails(
      engine.import('imp', {
        ...base,
        rows: [
          [3, 'c'],
          [1, 'dup'],
        ],
      }),
    );
    expect(e.code).toBe('SQLITE_CONSTRAINT_PRIMARYKEY');
    expect((await engine.query('imp', { sql: 'SELECT count(*) FROM "we""ird"' })).rows).toEqual([[2]]);
    const ign = await engine.import('imp', {
      ...base,
      rows: [
        [3, 'c'],
        [1, 'dup'],
      ],
      onConflict: 'ignore',
    });
    expect(ign).toEqual({ imported: 1, total: 2 });
    const rep = await engine.import('imp', {
      ...base,
      rows: [
        [1, 'new'],
        [4, 'd'],
      ],
      onConflict: 'replace',
    });
    expect(rep).toEqual({ imported: 2, total: 2 });
    const all = await engine.query('imp', { sql: 'SELECT id, "na me" FROM "we""ird" ORDER BY id' });
    expect(all.rows).toEqual([
      [1, 'new'],
      [2, 'b'],
      [3, 'c'],
      [4, 'd'],
    ]);
    const bad = await fails(
      engine.import('imp', { table: 'x"; DROP TABLE "we""ird', columns: ['a'], rows: [[1]] }),
    );
    expect(bad).toMatchObject({ code: 'SQLITE_ERROR', message: expect.stringContaining('no such table') });
    expect((await fails(engine.import('imp', { ...base, rows: [[9]] }))).code).toBe('InvalidRequest');
  });

  it('imports 10,000 rows of 5 columns in one request', async () => {
    await engine.create('bulk');
    await engine.query('bulk', {
      sql: 'CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL, d INT, e TEXT)',
    });
    const rows = Array.from({ length: 10_000 }, (_, i) => [i, `name-${i}`, i * 1.5, i % 7, `e${i}`]);
    // How fast is for bench/databases (import of 10,000 rows: < 250 ms there).
    expect(await engine.import('bulk', { table: 't', columns: ['a', 'b', 'c', 'd', 'e'], rows })).toEqual({
      imported: 10_000,
      total: 10_000,
    });
    expect(await engine.usage('bulk')).toMatchObject({ rowsWritten: 10_000 });
  });

  it('request schemas accept exactly one body shape', () => {
    expect(
      databaseQueryBodySchema.safeParse({ sql: 'SELECT 1', args: [1, { base64: 'AA==' }] }).success,
    ).toBe(true);
    expect(databaseQueryBodySchema.safeParse({ statements: [{ sql: 'SELECT 1' }] }).success).toBe(true);
    expect(databaseQueryBodySchema.safeParse({ table: 't', columns: ['a'], rows: [[1]] }).success).toBe(true);
    expect(databaseQueryBodySchema.safeParse({ sql: 'SELECT 1', statements: [] }).success).toBe(false);
    const tooMany = { statements: Array.from({ length: 21 }, () => ({ sql: 'SELECT 1' })) };
    expect(databaseQueryBodySchema.safeParse(tooMany).success).toBe(false);
  });
});

describe('files', () => {
  it('export is a consistent snapshot while writes go on', async () => {
    await engine.create('exp');
    await engine.query('exp', { sql: 'CREATE TABLE t(x INTEGER PRIMARY KEY, pad BLOB)' });
    await engine.import('exp', {
      table: 't',
      columns: ['x', 'pad'],
      rows: Array.from({ length: 3000 }, (_, i) => [i, { base64: Buffer.alloc(200, i).toString('base64') }]),
    });
    let stop = false;
    let writes = 0;
    const writer = (async () => {
      while (!stop) {
        await engine.batch('exp', [
          { sql: 'INSERT INTO t(pad) VALUES (randomblob(200))' },
          { sql: 'DELETE FROM t WHERE x = (SELECT min(x) FROM t)' },
        ]);
        writes++;
      }
    })();
    const snaps = [];
    for (let i = 0; i < 3; i++) snaps.push(await engine.export('exp'));
    stop = true;
    await writer;
    expect(writes).toBeGreaterThan(0);
    for (const s of snaps) {
      const db = new DatabaseSync(s.path, { readOnly: true });
      expect(db.prepare('PRAGMA integrity_check').get()).toEqual({ integrity_check: 'ok' });
      // Each batch inserts one row and deletes one: a torn copy would not have 3000.
      expect(db.prepare('SELECT count(*) AS n FROM t').get()).toEqual({ n: 3000 });
      db.close();
      await s.dispose();
      expect(existsSync(s.path)).toBe(false);
    }
  });

  it('delete removes every file and sizes are reported', async () => {
    await engine.create('gone');
    await engine.query('gone', { sql: 'CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(50000))' });
    expect(await engine.sizeBytes('gone')).toBeGreaterThan(50_000);
    expect(readdirSync(dir).filter((f) => f.startsWith('gone.'))).toEqual(
      expect.arrayContaining(['gone.sqlite', 'gone.sqlite-wal', 'gone.sqlite-shm']),
    );
    await engine.delete('gone');
    expect(readdirSync(dir).filter((f) => f.startsWith('gone.'))).toEqual([]);
    expect(await engine.exists('gone')).toBe(false);
    expect((await fails(engine.query('gone', { sql: 'SELECT 1' }))).code).toBe('DatabaseNotFound');
    await engine.create('gone');
    expect((await fails(engine.query('gone', { sql: 'SELECT * FROM t' }))).message).toBe('no such table: t');
  });

  it('refuses ids that could leave the directory', async () => {
    for (const id of ['../x', 'a/b', '..', '.hidden', 'a.b', '', 'a\0b', 'x'.repeat(129), '/etc/passwd']) {
      expect((await fails(engine.create(id))).code).toBe('InvalidDatabaseId');
      expect((await fails(engine.query(id, { sql: 'SELECT 1' }))).code).toBe('InvalidDatabaseId');
      expect((await fails(engine.delete(id))).code).toBe('InvalidDatabaseId');
    }
  });
});

describe('statement cache', () => {
  it('a cached SELECT * reports the columns of the current schema after ALTER TABLE, from any connection', async () => {
    await engine.create('cols');
    const star = { sql: 'SELECT * FROM t' };
    await engine.query('cols', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)' });
    await engine.query('cols', { sql: "INSERT INTO t VALUES (1, 'a')" });
    expect((await engine.query('cols', star)).columns).toEqual(['id', 'v']);
    await engine.query('cols', { sql: 'ALTER TABLE t ADD COLUMN w INT' });
    const r = await engine.query('cols', star);
    expect(r.columns).toEqual(['id', 'v', 'w']);
    expect(r.columnTypes).toEqual(['INTEGER', 'TEXT', 'INT']);
    expect(r.rows).toEqual([[1, 'a', null]]);
    await engine.query('cols', { sql: 'ALTER TABLE t RENAME COLUMN v TO v2' });
    expect((await engine.query('cols', star)).columns).toEqual(['id', 'v2', 'w']);
    // A schema change by another connection (not through this engine's executors).
    const other = new DatabaseSync(path.join(dir, 'cols.sqlite'));
    try {
      other.exec('ALTER TABLE t RENAME COLUMN w TO w2');
    } finally {
      other.close();
    }
    for (let i = 0; i < 4; i++) expect((await engine.query('cols', star)).columns).toEqual(['id', 'v2', 'w2']);
    // An empty result still names the current columns.
    const empty = await engine.query('cols', { sql: 'SELECT * FROM t WHERE id = 99' });
    expect(empty.columns).toEqual(['id', 'v2', 'w2']);
  });
});

describe('delete while requests are pipelined', () => {
  it('waits for the requests ahead of it; the ones behind it find no database', async () => {
    await engine.create('busy');
    await engine.query('busy', { sql: 'CREATE TABLE t(k INT)' });
    const ahead = Array.from({ length: 40 }, (_, k) =>
      engine.query('busy', { sql: 'INSERT INTO t VALUES (?)', args: [k] }),
    );
    const deleted = engine.delete('busy');
    const behind = engine.query('busy', { sql: 'SELECT count(*) FROM t' }).then(
      () => null,
      (e: unknown) => e,
    );
    const results = await Promise.all(ahead);
    expect(results.every((r) => r.rowsWritten === 1)).toBe(true);
    await deleted;
    expect(((await behind) as DatabaseEngineError).code).toBe('DatabaseNotFound');
    expect(existsSync(path.join(dir, 'busy.sqlite'))).toBe(false);
  });
});
