import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller, sdk } from './helpers.js';

describe('POST /databases/{dbId}/query', () => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let dbId: string;
  const q = (body: unknown, id = dbId) => call('POST', `/databases/${id}/query`, body);

  beforeAll(async () => {
    t = await startNube();
    call = caller(t);
    dbId = (await json(await call('POST', '/databases', { name: 'main' }))).id;
    const r = await q({
      sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, n REAL, b BLOB)',
    });
    expect(r.status).toBe(200);
  });
  afterAll(() => t?.close());

  it('runs one statement with positional and named args and returns a QueryResult (SDK)', async () => {
    const nube = sdk(t);
    const ins = await nube.databases.query(dbId, {
      sql: 'INSERT INTO t (id, name, n) VALUES (?, ?, ?)',
      args: [1, 'one', 1.5],
    });
    expect(ins).toMatchObject({
      columns: [],
      rows: [],
      rowsAffected: 1,
      lastInsertRowid: '1',
      rowsWritten: 1,
    });
    await nube.databases.query(dbId, {
      sql: 'INSERT INTO t (id, name) VALUES (:id, $name)',
      args: { id: 2, name: 'two' },
    });
    const sel = await nube.databases.query(dbId, {
      sql: 'SELECT id, name, n, n * 2 AS twice FROM t WHERE id <= ? ORDER BY id',
      args: [2],
    });
    expect(sel).toMatchObject({
      columns: ['id', 'name', 'n', 'twice'],
      columnTypes: ['INTEGER', 'TEXT', 'REAL', null],
      rows: [
        [1, 'one', 1.5, 3],
        [2, 'two', null, null],
      ],
      rowsAffected: 0,
      lastInsertRowid: null,
      rowsRead: 2,
      rowsWritten: 0,
    });
    expect(typeof (sel as { durationMs: number }).durationMs).toBe('number');
  });

  it('answers SQL errors with 400, SQLite message and extended code', async () => {
    const dup = await q({ sql: "INSERT INTO t (id, name) VALUES (1, 'again')" });
    expect(dup.status).toBe(400);
    expect(await json(dup)).toEqual({
      error: 'UNIQUE constraint failed: t.id',
      code: 'SQLITE_CONSTRAINT_PRIMARYKEY',
    });
    const uniq = await q({ sql: "INSERT INTO t (id, name) VALUES (99, 'one')" });
    expect(await json(uniq)).toEqual({
      error: 'UNIQUE constraint failed: t.name',
      code: 'SQLITE_CONSTRAINT_UNIQUE',
    });
    const nn = await q({ sql: 'INSERT INTO t (id) VALUES (98)' });
    expect(await json(nn)).toMatchObject({ code: 'SQLITE_CONSTRAINT_NOTNULL' });
    const syntax = await q({ sql: 'SELEC 1' });
    expect(syntax.status).toBe(400);
    expect(await json(syntax)).toMatchObject({
      code: 'SQLITE_ERROR',
      error: expect.stringContaining('syntax error'),
    });
    const noTable = await q({ sql: 'SELECT * FROM nope' });
    expect(await json(noTable)).toEqual({ error: 'no such table: nope', code: 'SQLITE_ERROR' });
  });

  it('refuses any body that is not exactly one of the three shapes', async () => {
    for (const body of [
      {},
      { sql: '' },
      { sql: 'SELECT 1', statements: [{ sql: 'SELECT 1' }] },
      { sql: 'SELECT 1', extra: true },
      { statements: [] },
      { statements: Array.from({ length: 21 }, () => ({ sql: 'SELECT 1' })) },
      { table: 't', columns: ['id'], rows: Array.from({ length: 10_001 }, (_, i) => [i]) },
      { table: 't', columns: ['id'], rows: [[1]], onConflict: 'merge' },
      { sql: 'SELECT ?', args: [[1]] },
      { sql: 'SELECT ?', args: [{ base64: '***' }] },
      'SELECT 1',
      [{ sql: 'SELECT 1' }],
    ]) {
      const r = await q(body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect((await json(r)).code).toBe('ValidationError');
    }
    const empty = await q({ sql: ';' });
    expect(empty.status).toBe(400);
  });

  it('runs a batch in one transaction: all or nothing, with the failing statement index', async () => {
    const ok = await json(
      await q({
        statements: [
          { sql: "INSERT INTO t (id, name) VALUES (10, 'ten')" },
          { sql: 'UPDATE t SET n = ? WHERE id = 10', args: [{ real: 10 }] },
          { sql: 'SELECT n, typeof(n) FROM t WHERE id = 10' },
        ],
      }),
    );
    expect(ok.results).toHaveLength(3);
    expect(ok.results[2].rows).toEqual([[10, 'real']]);
    const bad = await q({
      statements: [
        { sql: "INSERT INTO t (id, name) VALUES (11, 'eleven')" },
        { sql: "INSERT INTO t (id, name) VALUES (12, 'ten')" },
      ],
    });
    expect(bad.status).toBe(400);
    expect(await json(bad)).toMatchObject({ code: 'SQLITE_CONSTRAINT_UNIQUE', statementIndex: 1 });
    const after = await json(await q({ sql: 'SELECT count(*) FROM t WHERE id IN (11, 12)' }));
    expect(after.rows).toEqual([[0]]);
  });

  it('imports rows in one transaction with onConflict abort, ignore and replace', async () => {
    await q({ sql: 'CREATE TABLE imp (id INTEGER PRIMARY KEY, v TEXT)' });
    const rows = Array.from({ length: 10_000 }, (_, i) => [i, `v${i}`]);
    expect(await json(await q({ table: 'imp', columns: ['id', 'v'], rows }))).toEqual({
      imported: 10_000,
      total: 10_000,
    });
    const clash = [
      [9_999, 'new'],
      [10_000, 'x'],
    ];
    const abort = await q({ table: 'imp', columns: ['id', 'v'], rows: clash });
    expect(abort.status).toBe(400);
    expect((await json(abort)).code).toBe('SQLITE_CONSTRAINT_PRIMARYKEY');
    expect((await json(await q({ sql: 'SELECT count(*) FROM imp' }))).rows).toEqual([[10_000]]);
    expect(
      await json(await q({ table: 'imp', columns: ['id', 'v'], rows: clash, onConflict: 'ignore' })),
    ).toEqual({ imported: 1, total: 2 });
    expect((await json(await q({ sql: 'SELECT v FROM imp WHERE id = 9999' }))).rows).toEqual([['v9999']]);
    expect(
      await json(await q({ table: 'imp', columns: ['id', 'v'], rows: clash, onConflict: 'replace' })),
    ).toEqual({ imported: 2, total: 2 });
    expect((await json(await q({ sql: 'SELECT v FROM imp WHERE id = 9999' }))).rows).toEqual([['new']]);
    const ragged = await q({ table: 'imp', columns: ['id', 'v'], rows: [[1]] });
    expect(ragged.status).toBe(400);
    expect((await json(ragged)).code).toBe('InvalidRequest');
    const noTable = await q({ table: 'missing', columns: ['a'], rows: [[1]] });
    expect(noTable.status).toBe(400);
  });

  it('round-trips 64-bit integers and blobs exactly', async () => {
    await q({ sql: 'CREATE TABLE v (i INTEGER, b BLOB)' });
    const big = '9223372036854775807';
    const blob = Buffer.from([0, 1, 2, 254, 255, 0x80]).toString('base64');
    const ins = await q({
      sql: 'INSERT INTO v VALUES (?, ?), (?, ?)',
      args: [{ integer: big }, { base64: blob }, { integer: '-9007199254740993' }, null],
    });
    expect(ins.status).toBe(200);
    const r = await json(await q({ sql: 'SELECT i, b, i - 1, typeof(i), length(b) FROM v ORDER BY rowid' }));
    expect(r.rows[0]).toEqual([
      { integer: big },
      { base64: blob },
      { integer: '9223372036854775806' },
      'integer',
      6,
    ]);
    expect(r.rows[1]).toEqual([
      { integer: '-9007199254740993' },
      null,
      { integer: '-9007199254740994' },
      'integer',
      null,
    ]);
    const edge = await json(await q({ sql: "SELECT 9007199254740991, 9007199254740992, 1e308 * 10, x''" }));
    expect(edge.rows[0]).toEqual([
      9007199254740991,
      { integer: '9007199254740992' },
      { real: 'Infinity' },
      { base64: '' },
    ]);
  });

  it('refuses hostile SQL inside SQLite (SQLITE_AUTH), leaving the database usable', async () => {
    const stolen = join(t.dataDir, `stolen-${Date.now()}.db`);
    for (const sql of [
      "ATTACH DATABASE '/tmp/x.db' AS x",
      "ATTACH DATABASE ':memory:' AS m",
      `VACUUM INTO '${stolen}'`,
      "SELECT load_extension('/usr/lib/x.so')",
      'PRAGMA writable_schema = ON',
      'PRAGMA journal_mode = DELETE',
      'PRAGMA synchronous = OFF',
    ]) {
      const r = await q({ sql });
      expect(r.status, sql).toBe(400);
      const body = await json(r);
      expect(body.code, sql).toMatch(/^SQLITE_(AUTH|ERROR)$/);
      expect(body.error, sql).toMatch(/not authorized|authorization denied|no such function/);
    }
    expect(existsSync(stolen)).toBe(false);
    const wal = await json(await q({ sql: 'PRAGMA journal_mode' }));
    expect(wal.rows).toEqual([['wal']]);
  });

  it('stops a runaway WITH RECURSIVE with a clear 400 while another database answers', async () => {
    const other = (await json(await call('POST', '/databases', { name: 'other' }))).id;
    const started = Date.now();
    const runaway = q({
      sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c',
    });
    await new Promise((r) => setTimeout(r, 300));
    const t0 = Date.now();
    const quick = await q({ sql: 'SELECT 42' }, other);
    // Not held behind the runaway, which runs until its 10 s time limit (bench/databases has the latency).
    expect(Date.now() - t0).toBeLessThan(5000);
    expect((await json(quick)).rows).toEqual([[42]]);
    const res = await runaway;
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.code).toBe('QueryTimeout');
    expect(body.error).toMatch(/time limit/);
    // Stopped by the limit rather than running on: a generous bound for a busy machine.
    expect(Date.now() - started).toBeLessThan(60_000);
    // The database that ran it still answers.
    expect((await q({ sql: 'SELECT 1' })).status).toBe(200);
  }, 120_000);

  it('caps result size with ResultTooLarge', async () => {
    const r = await q({
      sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60000) SELECT x FROM c',
    });
    expect(r.status).toBe(400);
    expect((await json(r)).code).toBe('ResultTooLarge');
  });

  it('answers the same through MCP tools/call databases_query', async () => {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import(
      '@modelcontextprotocol/sdk/client/streamableHttp.js'
    );
    const client = new Client({ name: 'nube-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${t.ownerKey}` } },
      }),
    );
    const r = await client.callTool({
      name: 'databases_query',
      arguments: { dbId, body: { sql: 'SELECT name FROM t WHERE id = ?', args: [1] } },
    });
    expect(r.isError).toBe(false);
    expect((r.structuredContent as { rows: unknown[] }).rows).toEqual([['one']]);
    const bad = await client.callTool({
      name: 'databases_query',
      arguments: { dbId, body: { sql: 'ATTACH DATABASE ? AS x', args: ['/tmp/y'] } },
    });
    expect(bad.isError).toBe(true);
    expect((bad.structuredContent as { code: string }).code).toBe('SQLITE_AUTH');
    await client.close();
  });
});
