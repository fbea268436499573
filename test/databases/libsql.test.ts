import { createClient, LibsqlBatchError, LibsqlError } from '@libsql/client/http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// The real @libsql/client (HTTP, Hrana v2 over JSON) against a nube started here, on both metadata stores.
describe.each(DIALECTS)('libSQL client against nube (%s)', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let url: string;
  let dbId: string;

  beforeAll(async () => {
    t = await startNube({
      dialect,
      env: { NUBE_LIBSQL_STREAM_IDLE_MS: '1500', NUBE_LIBSQL_STREAMS_PER_OWNER: '3' },
    });
    call = caller(t);
    const db = await json(await call('POST', '/databases', { name: 'libsql' }));
    dbId = db.id;
    url = db.libsqlUrl;
  });
  afterAll(() => t?.close());

  const client = (authToken = t.ownerKey) => createClient({ url, authToken });

  it('carries libsqlUrl on the database record', async () => {
    expect(url).toBe(`${t.baseUrl}/libsql/${dbId}/`);
    const got = await json(await call('GET', `/databases/${dbId}`));
    expect(got.libsqlUrl).toBe(url);
  });

  it('executes with positional and named arguments and every value type, big integers exact', async () => {
    const c = client();
    await c.execute('CREATE TABLE v (id INTEGER PRIMARY KEY, i INTEGER, f REAL, t TEXT, b BLOB, n)');
    const big = 9007199254740993n; // 2^53 + 1: a JS number would round it
    const blob = new Uint8Array([0, 1, 2, 250, 255]);
    const ins = await c.execute({
      sql: 'INSERT INTO v (i, f, t, b, n) VALUES (?, ?, ?, ?, ?)',
      args: [big, 1.5, 'héllo', blob, null],
    });
    expect(ins.rowsAffected).toBe(1);
    expect(ins.lastInsertRowid).toBe(1n);
    await c.execute({
      sql: 'INSERT INTO v (i, f, t) VALUES (:i, @f, $t)',
      args: { i: -9223372036854775808n, f: 2.25, t: 'named' },
    });
    await c.execute({ sql: 'INSERT INTO v (i, t) VALUES (?2, ?1)', args: ['numbered', 7] });
    // intMode 'number' (the default) refuses integers a number cannot hold: read them as bigint.
    const exact = createClient({ url, authToken: t.ownerKey, intMode: 'bigint' });
    const all = await exact.execute('SELECT i, f, t, b, n, typeof(f) AS tf FROM v ORDER BY id');
    expect(all.columns).toEqual(['i', 'f', 't', 'b', 'n', 'tf']);
    expect(all.columnTypes).toEqual(['INTEGER', 'REAL', 'TEXT', 'BLOB', '', '']);
    expect(all.rows.length).toBe(3);
    expect(all.rows.map((row) => row.i)).toEqual([big, -9223372036854775808n, 7n]);
    const tooBig = await c.execute('SELECT i FROM v WHERE id = 1').catch((e: unknown) => e);
    expect(tooBig).toBeInstanceOf(RangeError);
    expect(all.rows[0]?.f).toBe(1.5);
    expect(all.rows[0]?.t).toBe('héllo');
    expect(new Uint8Array(all.rows[0]?.b as ArrayBuffer)).toEqual(blob);
    expect(all.rows[0]?.n).toBeNull();
    expect(all.rows[1]).toMatchObject({ f: 2.25, t: 'named', tf: 'real' });
    expect(all.rows[2]).toMatchObject({ i: 7n, t: 'numbered' });
    // The client sends every JS number as a Hrana float: it is a REAL, integral or not (as on libSQL's
    // server); a bigint is an INTEGER.
    const f = await c.execute({
      sql: 'SELECT typeof(?) AS a, typeof(?) AS b, typeof(?) AS c',
      args: [3.5, 3, 3n],
    });
    expect(f.rows[0]).toMatchObject({ a: 'real', b: 'real', c: 'integer' });
    exact.close();
    c.close();
  });

  it('batch: write and read modes, all or nothing', async () => {
    const c = client();
    await c.execute('CREATE TABLE acct (id INTEGER PRIMARY KEY, name TEXT UNIQUE)');
    const rs = await c.batch(
      [
        { sql: 'INSERT INTO acct (name) VALUES (?)', args: ['a'] },
        { sql: 'INSERT INTO acct (name) VALUES (?)', args: ['b'] },
        'SELECT count(*) AS n FROM acct',
      ],
      'write',
    );
    expect(rs[2]?.rows[0]?.n).toBe(2);
    const err = await c
      .batch(["INSERT INTO acct (name) VALUES ('c')", "INSERT INTO acct (name) VALUES ('a')"], 'write')
      .catch((e: unknown) => e);
    // The primary code, as libSQL's server sends it, for every constraint kind; the batch says which step.
    expect(err).toBeInstanceOf(LibsqlBatchError);
    expect((err as LibsqlBatchError).code).toBe('SQLITE_CONSTRAINT');
    expect((err as LibsqlBatchError).statementIndex).toBe(1);
    expect((err as LibsqlError).message).toMatch(/UNIQUE constraint failed: acct.name/);
    // 'c' was rolled back with the failing statement.
    expect((await c.execute('SELECT name FROM acct ORDER BY id')).rows.map((r) => r.name)).toEqual([
      'a',
      'b',
    ]);
    const read = await c.batch(['SELECT count(*) AS n FROM acct', 'SELECT max(id) AS m FROM acct'], 'read');
    expect(read.map((r) => r.rows[0]?.[0])).toEqual([2, 2]);
    const noWrite = await c.batch(["INSERT INTO acct (name) VALUES ('r')"], 'read').catch((e: unknown) => e);
    expect((noWrite as LibsqlError).code).toMatch(/^SQLITE_READONLY/);
    expect((await c.execute('SELECT count(*) AS n FROM acct')).rows[0]?.n).toBe(2);
    c.close();
  });

  it('interactive transactions: commit, rollback, isolation until commit', async () => {
    const c = client();
    await c.execute('CREATE TABLE tx (v TEXT)');
    const tx = await c.transaction('write');
    await tx.execute({ sql: 'INSERT INTO tx VALUES (?)', args: ['one'] });
    expect((await tx.execute('SELECT count(*) AS n FROM tx')).rows[0]?.n).toBe(1);
    // Another connection does not see it yet.
    expect((await c.execute('SELECT count(*) AS n FROM tx')).rows[0]?.n).toBe(0);
    await tx.execute({ sql: 'INSERT INTO tx VALUES (?)', args: ['two'] });
    await tx.commit();
    expect((await c.execute('SELECT count(*) AS n FROM tx')).rows[0]?.n).toBe(2);

    const tx2 = await c.transaction('write');
    await tx2.execute("INSERT INTO tx VALUES ('three')");
    await tx2.rollback();
    expect((await c.execute('SELECT count(*) AS n FROM tx')).rows[0]?.n).toBe(2);

    const tx3 = await c.transaction('deferred');
    await tx3.executeMultiple("INSERT INTO tx VALUES ('four'); INSERT INTO tx VALUES ('five');");
    await tx3.commit();
    expect((await c.execute('SELECT count(*) AS n FROM tx')).rows[0]?.n).toBe(4);
    c.close();
  });

  it('an expired baton is an error and its transaction was rolled back', async () => {
    const c = client();
    await c.execute('CREATE TABLE exp (v TEXT)');
    const tx = await c.transaction('write');
    await tx.execute("INSERT INTO exp VALUES ('lost')");
    // Idle expiry is 1.5 s here (long enough that a busy machine does not expire the other tests' streams).
    await new Promise((r) => setTimeout(r, 3500));
    const err = await tx.execute('SELECT 1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibsqlError);
    expect((err as LibsqlError).code).toBe('STREAM_EXPIRED');
    tx.close();
    // The write lock is gone with it: others write again, and 'lost' is not there.
    await c.execute("INSERT INTO exp VALUES ('kept')");
    expect((await c.execute('SELECT v FROM exp')).rows.map((r) => r.v)).toEqual(['kept']);
    c.close();
  });

  it('executeMultiple and migrate', async () => {
    const c = client();
    await c.executeMultiple(`
      CREATE TABLE parent (id INTEGER PRIMARY KEY);
      CREATE TABLE child (id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id));
      INSERT INTO parent VALUES (1);
    `);
    expect((await c.execute('SELECT count(*) AS n FROM parent')).rows[0]?.n).toBe(1);
    await c.migrate([
      'CREATE TABLE child2 (id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id))',
      'INSERT INTO child2 SELECT * FROM child',
      'DROP TABLE child',
      'ALTER TABLE child2 RENAME TO child',
    ]);
    const cols = await c.execute("SELECT name FROM pragma_table_info('child')");
    expect(cols.rows.map((r) => r.name)).toEqual(['id', 'p']);
    // migrate() switched foreign keys off for itself only: they are enforced again afterwards.
    const fk = await c.execute('INSERT INTO child VALUES (1, 99)').catch((e: unknown) => e);
    expect((fk as LibsqlError).code).toBe('SQLITE_CONSTRAINT');
    expect((fk as LibsqlError).message).toMatch(/FOREIGN KEY constraint failed/);
    c.close();
  });

  it('keeps the /query protections: ATTACH is refused, errors reach the client', async () => {
    const c = client();
    const attach = await c.execute("ATTACH DATABASE '/tmp/x.db' AS x").catch((e: unknown) => e);
    expect(attach).toBeInstanceOf(LibsqlError);
    expect((attach as LibsqlError).code).toBe('SQLITE_AUTH');
    expect((attach as LibsqlError).message).toMatch(/ATTACH/);
    const vac = await c.execute("VACUUM INTO '/tmp/y.db'").catch((e: unknown) => e);
    expect((vac as LibsqlError).code).toBe('SQLITE_AUTH');
    const tx = await c.transaction('write');
    const inTx = await tx.execute("ATTACH DATABASE '/tmp/x.db' AS x").catch((e: unknown) => e);
    expect((inTx as LibsqlError).code).toBe('SQLITE_AUTH');
    await tx.rollback();
    const syntax = await c.execute('SELEC 1').catch((e: unknown) => e);
    expect((syntax as LibsqlError).code).toBe('SQLITE_ERROR');
    expect((syntax as LibsqlError).message).toMatch(/syntax error/);
    c.close();
  });

  it("another owner's key gets 404, a bad key 401", async () => {
    const other = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
    const err = await client(other)
      .execute('SELECT 1')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LibsqlError);
    expect((err as LibsqlError).message).toMatch(/not found/i);
    const txErr = await (await client(other).transaction('write'))
      .execute('SELECT 1')
      .catch((e: unknown) => e);
    expect((txErr as LibsqlError).message).toMatch(/not found/i);
    const r = await fetch(`${url}v2/pipeline`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer nube_sk_live_wrongwrongwrongwrongwrongwrongwrong',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ baton: null, requests: [{ type: 'close' }] }),
    });
    expect(r.status).toBe(401);
    const bad = await fetch(`${url}v2/pipeline`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ baton: null, requests: [{ type: 'execute', stmt: { sql: 1 } }] }),
    });
    expect(bad.status).toBe(400);
    expect((await json(bad)).issues.length).toBeGreaterThan(0);
  });

  it('a database token works for its database only, and stops when revoked', async () => {
    const created = await call('POST', `/databases/${dbId}/tokens`, { name: 'app' });
    expect(created.status).toBe(201);
    const tok = await json(created);
    expect(tok.token).toMatch(/^nube_db_/);
    expect(tok).toMatchObject({ databaseId: dbId, name: 'app' });
    const c = client(tok.token);
    expect((await c.execute('SELECT 41 + 1 AS n')).rows[0]?.n).toBe(42);
    const tx = await c.transaction('write');
    await tx.execute('SELECT 1');
    await tx.commit();
    // The same token on /query of its database, but no other operation.
    const q = await call('POST', `/databases/${dbId}/query`, { sql: 'SELECT 1 AS one' }, tok.token);
    expect(q.status).toBe(200);
    expect((await call('GET', '/databases', undefined, tok.token)).status).toBe(403);
    // Another database of the same owner is "not found" for it.
    const other = await json(await call('POST', '/databases', { name: 'libsql-other' }));
    const wrong = await createClient({ url: other.libsqlUrl, authToken: tok.token })
      .execute('SELECT 1')
      .catch((e: unknown) => e);
    expect((wrong as LibsqlError).message).toMatch(/not found/i);
    expect((await call('POST', `/databases/${other.id}/query`, { sql: 'SELECT 1' }, tok.token)).status).toBe(
      404,
    );
    const list = await json(await call('GET', `/databases/${dbId}/tokens`));
    expect(list.items.map((i: { id: string }) => i.id)).toEqual([tok.id]);
    expect(JSON.stringify(list)).not.toContain(tok.token);
    expect((await call('DELETE', `/databases/${dbId}/tokens/${tok.id}`)).status).toBe(200);
    const revoked = await c.execute('SELECT 1').catch((e: unknown) => e);
    expect((revoked as LibsqlError).message).toMatch(/401|unauthori/i);
    c.close();
  });

  it('bounds open streams per owner', async () => {
    const c = client();
    const txs = [];
    for (let i = 0; i < 3; i++) {
      const tx = await c.transaction('deferred');
      await tx.execute('SELECT 1');
      txs.push(tx);
    }
    const over = await (await c.transaction('deferred')).execute('SELECT 1').catch((e: unknown) => e);
    expect((over as LibsqlError).code).toBe('STREAM_LIMIT');
    for (const tx of txs) await tx.rollback();
    const again = await c.transaction('deferred');
    await again.execute('SELECT 1');
    await again.commit();
    c.close();
  });

  it('keeps the time limit: a runaway query in a transaction is stopped and the stream ends', async () => {
    const c = client();
    await c.execute('CREATE TABLE slow (v TEXT)');
    const tx = await c.transaction('write');
    await tx.execute("INSERT INTO slow VALUES ('never')");
    const runaway = 'WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r';
    const err = await tx.execute(runaway).catch((e: unknown) => e);
    expect((err as LibsqlError).code).toBe('QueryTimeout');
    expect(tx.closed).toBe(true);
    // Its transaction went with the executor: nothing was kept, and the database takes writes again.
    await c.execute("INSERT INTO slow VALUES ('after')");
    expect((await c.execute('SELECT v FROM slow')).rows.map((r) => r.v)).toEqual(['after']);
    c.close();
  }, 40_000);
});
