import { createClient, LibsqlBatchError, LibsqlError } from '@libsql/client';
import { openWs } from '@libsql/hrana-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { DIALECTS } from '../helpers/pg.js';
import { json, newOwnerKey, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// libSQL's Hrana over WebSocket (hrana3/hrana2) on the database's libsqlUrl, through the real
// @libsql/client and hrana-client with ws:// URLs, plus the raw protocol where clients do not go.
describe.each(DIALECTS)('libSQL over WebSocket (%s)', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let wsUrl: string;
  let dbId: string;

  beforeAll(async () => {
    t = await startNube({
      dialect,
      env: { NUBE_LIBSQL_STREAM_IDLE_MS: '1500', NUBE_LIBSQL_STREAMS_PER_OWNER: '5' },
    });
    call = caller(t);
    const db = await json(await call('POST', '/databases', { name: 'ws' }));
    dbId = db.id;
    wsUrl = db.libsqlUrl.replace(/^http/, 'ws');
  });
  afterAll(() => t?.close());

  const client = (authToken = t.ownerKey) => createClient({ url: wsUrl, authToken, intMode: 'bigint' });

  it('executes, batches and runs transactions as over HTTP', async () => {
    const c = client();
    try {
      await c.execute('CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT UNIQUE, f REAL)');
      const ins = await c.execute({ sql: 'INSERT INTO kv (v, f) VALUES (?, ?)', args: ['a', 3] });
      expect(ins.rowsAffected).toBe(1);
      expect(ins.lastInsertRowid).toBe(1n);
      const rs = await c.batch(
        [
          { sql: 'INSERT INTO kv (v, f) VALUES (?, ?)', args: ['b', -0] },
          { sql: 'INSERT INTO kv (v, f) VALUES (:v, :f)', args: { v: 'c', f: 5e-324 } },
          'SELECT k, v, f, typeof(f) AS tf FROM kv ORDER BY k',
        ],
        'write',
      );
      expect(rs[2]?.columns).toEqual(['k', 'v', 'f', 'tf']);
      expect(rs[2]?.rows.map((r) => [r.v, r.f, r.tf])).toEqual([
        ['a', 3, 'real'],
        ['b', 0, 'real'],
        ['c', 5e-324, 'real'],
      ]);
      // A failing batch is all or nothing, and says which statement failed with libSQL's code.
      const err = await c
        .batch(["INSERT INTO kv (v) VALUES ('d')", "INSERT INTO kv (v) VALUES ('a')"], 'write')
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LibsqlBatchError);
      expect((err as LibsqlBatchError).code).toBe('SQLITE_CONSTRAINT');
      expect((err as LibsqlBatchError).statementIndex).toBe(1);
      expect((await c.execute("SELECT count(*) AS n FROM kv WHERE v = 'd'")).rows[0]?.n).toBe(0n);

      const tx = await c.transaction('write');
      await tx.execute("INSERT INTO kv (v) VALUES ('t1')");
      expect((await tx.execute("SELECT count(*) AS n FROM kv WHERE v = 't1'")).rows[0]?.n).toBe(1n);
      await tx.rollback();
      expect((await c.execute("SELECT count(*) AS n FROM kv WHERE v = 't1'")).rows[0]?.n).toBe(0n);
      const tx2 = await c.transaction('write');
      await tx2.execute("INSERT INTO kv (v) VALUES ('t2')");
      await tx2.commit();
      expect((await c.execute("SELECT count(*) AS n FROM kv WHERE v = 't2'")).rows[0]?.n).toBe(1n);

      await c.executeMultiple('CREATE TABLE m (x); INSERT INTO m VALUES (1); INSERT INTO m VALUES (2);');
      expect((await c.execute('SELECT sum(x) AS s FROM m')).rows[0]?.s).toBe(3n);
      const bad = await c.execute('SELECT nope').catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(LibsqlError);
      expect((bad as LibsqlError).code).toBe('SQLITE_ERROR');
    } finally {
      c.close();
    }
  });

  it('describes statements and reports autocommit over hrana3', async () => {
    const h = openWs(wsUrl, t.ownerKey, 3);
    try {
      expect(await h.getVersion()).toBe(3);
      const s = h.openStream();
      const d = await s.describe('SELECT k, v AS value FROM kv WHERE k = :k AND v = ?');
      expect(d.paramNames).toEqual([':k', undefined]);
      expect(d.columns.map((c) => [c.name, c.decltype])).toEqual([
        ['k', 'INTEGER'],
        ['value', 'TEXT'],
      ]);
      expect(d.isExplain).toBe(false);
      expect(d.isReadonly).toBe(true);
      const w = await s.describe("INSERT INTO kv (v) VALUES ('x')");
      expect(w.isReadonly).toBe(false);
      expect((await s.describe('EXPLAIN SELECT 1')).isExplain).toBe(true);
      expect(await s.getAutocommit()).toBe(true);
      await s.run('BEGIN');
      expect(await s.getAutocommit()).toBe(false);
      await s.run('ROLLBACK');
      s.close();
    } finally {
      h.close();
    }
  });

  it('keeps the protections: a bad credential, another owner, the authorizer, database tokens', async () => {
    const bad = createClient({ url: wsUrl, authToken: 'nube_sk_live_nope' });
    const e1 = await bad.execute('SELECT 1').catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(LibsqlError);
    bad.close();

    const other = createClient({ url: wsUrl, authToken: newOwnerKey() });
    const e2 = await other.execute('SELECT 1').catch((e: unknown) => e);
    expect(e2).toBeInstanceOf(LibsqlError);
    other.close();

    const c = client();
    try {
      const attach = await c.execute("ATTACH DATABASE '/tmp/x.db' AS x").catch((e: unknown) => e);
      expect((attach as LibsqlError).code).toBe('SQLITE_AUTH');
    } finally {
      c.close();
    }

    // A database token reaches its database only.
    const tok = await json(await call('POST', `/databases/${dbId}/tokens`, { name: 'ws' }));
    const scoped = client(tok.token);
    try {
      expect((await scoped.execute('SELECT count(*) AS n FROM kv')).rows[0]?.n).toBeGreaterThan(0n);
    } finally {
      scoped.close();
    }
    const db2 = await json(await call('POST', '/databases', { name: 'ws-other' }));
    const wrong = createClient({ url: db2.libsqlUrl.replace(/^http/, 'ws'), authToken: tok.token });
    const e3 = await wrong.execute('SELECT 1').catch((e: unknown) => e);
    expect(e3).toBeInstanceOf(LibsqlError);
    wrong.close();
  });

  it('speaks the raw protocol: hello first, stored SQL, cursors, errors per request', async () => {
    const ws = new WebSocket(`${wsUrl}`, ['hrana3']);
    // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
    const got: any[] = [];
    const waiters: (() => void)[] = [];
    ws.on('message', (d) => {
      got.push(JSON.parse(String(d)));
      for (const w of waiters.splice(0)) w();
    });
    await new Promise((r) => ws.once('open', r));
    expect(ws.protocol).toBe('hrana3');
    const until = async (n: number) => {
      while (got.length < n) await new Promise<void>((r) => waiters.push(r));
    };
    const send = (m: unknown) => ws.send(JSON.stringify(m));
    send({ type: 'hello', jwt: t.ownerKey });
    send({
      type: 'request',
      request_id: 1,
      request: { type: 'store_sql', sql_id: 7, sql: 'SELECT ?1 * 2 AS d' },
    });
    send({ type: 'request', request_id: 2, request: { type: 'open_stream', stream_id: 1 } });
    send({
      type: 'request',
      request_id: 3,
      request: {
        type: 'open_cursor',
        stream_id: 1,
        cursor_id: 4,
        batch: {
          steps: [
            { stmt: { sql_id: 7, args: [{ type: 'integer', value: '21' }] } },
            { stmt: { sql: 'SELECT nope' } },
          ],
        },
      },
    });
    send({ type: 'request', request_id: 4, request: { type: 'fetch_cursor', cursor_id: 4, max_count: 2 } });
    send({ type: 'request', request_id: 5, request: { type: 'fetch_cursor', cursor_id: 4, max_count: 100 } });
    send({
      type: 'request',
      request_id: 6,
      request: { type: 'execute', stream_id: 9, stmt: { sql: 'SELECT 1' } },
    });
    send({ type: 'request', request_id: 7, request: { type: 'close_stream', stream_id: 1 } });
    await until(8);
    expect(got[0]).toEqual({ type: 'hello_ok' });
    const byId = new Map(got.slice(1).map((m) => [m.request_id, m]));
    expect(byId.get(3)).toEqual({ type: 'response_ok', request_id: 3, response: { type: 'open_cursor' } });
    expect(byId.get(4).response).toEqual({
      type: 'fetch_cursor',
      entries: [
        { type: 'step_begin', step: 0, cols: [{ name: 'd', decltype: null }] },
        { type: 'row', row: [{ type: 'integer', value: '42' }] },
      ],
      done: false,
    });
    expect(byId.get(5).response.done).toBe(true);
    expect(byId.get(5).response.entries).toEqual([
      { type: 'step_end', affected_row_count: 0, last_insert_rowid: null },
      { type: 'step_error', step: 1, error: { code: 'SQLITE_ERROR', message: 'no such column: nope' } },
    ]);
    expect(byId.get(6)).toMatchObject({ type: 'response_error', error: { code: 'STREAM_NOT_FOUND' } });
    expect(byId.get(7)).toMatchObject({ type: 'response_ok', response: { type: 'close_stream' } });
    ws.close();

    // A request before hello closes the socket.
    const early = new WebSocket(wsUrl, ['hrana2']);
    await new Promise((r) => early.once('open', r));
    early.send(
      JSON.stringify({ type: 'request', request_id: 1, request: { type: 'open_stream', stream_id: 1 } }),
    );
    const code = await new Promise<number>((r) => early.once('close', (c) => r(c)));
    expect(code).toBe(1008);
  });

  it('serves v3 cursors over HTTP', async () => {
    const url = wsUrl.replace(/^ws/, 'http');
    expect((await fetch(`${url}v3`)).status).toBe(200);
    const r = await fetch(`${url}v3/cursor`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        baton: null,
        batch: {
          steps: [{ stmt: { sql: 'SELECT 1 AS one UNION ALL SELECT 2' } }, { stmt: { sql: 'SELECT nope' } }],
        },
      }),
    });
    expect(r.status).toBe(200);
    const lines = (await r.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines[0].baton).toMatch(/^hb_/);
    expect(lines.slice(1)).toEqual([
      { type: 'step_begin', step: 0, cols: [{ name: 'one', decltype: null }] },
      { type: 'row', row: [{ type: 'integer', value: '1' }] },
      { type: 'row', row: [{ type: 'integer', value: '2' }] },
      { type: 'step_end', affected_row_count: 0, last_insert_rowid: null },
      { type: 'step_error', step: 1, error: { code: 'SQLITE_ERROR', message: 'no such column: nope' } },
    ]);
    // The stream goes on with the baton, and closes.
    const close = await fetch(`${url}v3/pipeline`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ baton: lines[0].baton, requests: [{ type: 'close' }] }),
    });
    expect((await json(close)).results[0].type).toBe('ok');
  });
});
