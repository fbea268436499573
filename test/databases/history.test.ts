import { mkdtempSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { materialize } from '../../src/areas/databases/history/materialize.js';
import { type S3rverHandle, startS3rver } from '../../src/blob/s3rver-harness.js';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

// Database history (issue 35) on one node, SQLite and PostgreSQL metadata, the local blob store and S3: the
// WAL is shipped in segments after a snapshot, the row names the latest one, a restore goes back to a
// time or a bookmark and is itself undoable, bad input answers 400/404, old generations are pruned, and
// a deleted database's history goes with it.
const CASES = [...DIALECTS.map((d) => [d, 'local'] as const), ['postgres', 's3'] as const];

describe.each(CASES)('database history (%s, %s blob store)', (dialect, backend) => {
  let t: TestNube;
  let s3: S3rverHandle | undefined;
  let s3dir: string | undefined;
  let otherKey: string;
  const call = (method: string, path: string, body?: unknown) => callJson(t.baseUrl, method, path, body, t.auth);
  const sql = async (id: string, s: string) => {
    const r = await call('POST', `/databases/${id}/query`, { sql: s });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body;
  };
  const rowOf = (id: string) =>
    t.nube.deps.store.db.selectFrom('databases').select(['copy_key', 'copy_at', 'size_bytes']).where('id', '=', id).executeTakeFirstOrThrow();
  const copies = () => t.nube.services.databases.copies;
  const store = () => t.nube.services.files.stores.at();
  const newDb = async (prefix: string) => {
    const made = await call('POST', '/databases', { name: `${prefix}${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}` });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    return made.body.id as string;
  };

  /** Ships the database and names a time after everything so far and before whatever comes next. */
  const pointAfter = async (id: string) => {
    await copies().shipNow(id);
    await new Promise((r) => setTimeout(r, 20));
    const at = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 20));
    return at;
  };

  beforeAll(async () => {
    let blob: Record<string, string> = {};
    if (backend === 's3') {
      s3dir = mkdtempSync(join(tmpdir(), 'nube-history-s3-'));
      s3 = await startS3rver(s3dir, ['nube-history']);
      blob = {
        NUBE_BLOB_BACKEND: 's3',
        NUBE_S3_ENDPOINT: s3.endpoint,
        NUBE_S3_BUCKET: 'nube-history',
        NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
        NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      };
    }
    t = await startNube({ dialect, env: { NUBE_DATABASE_SHIP_MS: '100', ...blob } });
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await s3?.stop();
    if (s3dir) rmSync(s3dir, { recursive: true, force: true });
  });

  it('ships the WAL in segments after a snapshot; bytes follow the pages changed, not the size', async () => {
    const id = await newDb('ship');
    await sql(id, 'create table big(b); create table t(x)');
    // About 2 MB in the database, then small writes.
    for (let i = 0; i < 4; i++) await sql(id, `insert into big values (randomblob(500000))`);
    const first = await copies().shipNow(id);
    expect(first.key).toMatch(new RegExp(`^database-history/${id}/gen_`));
    const gens = await copies().history.generations(id);
    expect(gens.length).toBe(1);
    const before = (await copies().history.segments(gens[0].id)).length;
    for (let i = 0; i < 10; i++) {
      await sql(id, `insert into t values (${i})`);
      await copies().shipNow(id);
    }
    const segs = await copies().history.segments(gens[0].id);
    expect(segs.length).toBe(before + 10);
    // Each single-row write ships a few pages, compressed: far less than the 2 MB database.
    for (const s of segs.slice(before)) expect(s.bytes).toBeLessThan(20_000);
    expect((await rowOf(id)).copy_key).toBe(segs.at(-1)?.key);
    // The head rebuilt from the store is the live database.
    const staging = join(t.dataDir, 'rebuilt.sqlite');
    const built = await materialize(store(), copies().history, id, { key: segs.at(-1)!.key }, staging);
    expect(built.segments).toBe(segs.length);
    const { DatabaseSync } = await import('@photostructure/sqlite');
    const db = new DatabaseSync(staging, { readOnly: true });
    expect(db.prepare('select count(*) as n, sum(x) as s from t').get()).toEqual({ n: 10, s: 45 });
    expect(db.prepare('select count(*) as n from big').get()).toEqual({ n: 4 });
    db.close();
    await rm(staging, { force: true });
  }, 60_000);

  it('checkpoints a long WAL and keeps one chain across the WAL restart', async () => {
    const id = await newDb('ckpt');
    await sql(id, 'create table t(x, pad)');
    const ck = copies().stats.checkpoints;
    // Over 4 MB of WAL: the shipper checkpoints under the write lock; SQLite restarts the WAL after.
    for (let i = 0; i < 12; i++) {
      await sql(id, `insert into t values (${i}, randomblob(500000))`);
      await copies().shipNow(id);
    }
    expect(copies().stats.checkpoints).toBeGreaterThan(ck);
    for (let i = 12; i < 20; i++) await sql(id, `insert into t values (${i}, randomblob(100))`);
    await copies().shipNow(id);
    const gens = await copies().history.generations(id);
    expect(gens.length).toBe(1);
    const segs = await copies().history.segments(gens[0].id);
    expect(new Set(segs.map((s) => s.wal_index)).size).toBeGreaterThan(1);
    const staging = join(t.dataDir, 'rebuilt2.sqlite');
    await materialize(store(), copies().history, id, { key: (await rowOf(id)).copy_key! }, staging);
    const { DatabaseSync } = await import('@photostructure/sqlite');
    const db = new DatabaseSync(staging, { readOnly: true });
    expect(db.prepare('select count(*) as n, sum(x) as s from t').get()).toEqual({ n: 20, s: 190 });
    expect(db.prepare('pragma integrity_check').get()).toEqual({ integrity_check: 'ok' });
    db.close();
    await rm(staging, { force: true });
  }, 90_000);

  it('restores to a time and to a bookmark; the restore is undoable', async () => {
    const id = await newDb('pitr');
    await sql(id, "create table t(v); insert into t values ('one')");
    const t1 = await pointAfter(id);
    await sql(id, "insert into t values ('two')");
    const bm = await call('POST', `/databases/${id}/bookmarks`, { name: 'before migration' });
    expect(bm.status, JSON.stringify(bm.body)).toBe(201);
    expect(bm.body.name).toBe('before migration');
    await sql(id, "insert into t values ('three')");

    const back = await call('POST', `/databases/${id}/restore`, { at: t1 });
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    expect(Date.parse(back.body.restoredTo)).toBeLessThanOrEqual(Date.parse(t1));
    expect((await sql(id, 'select v from t order by rowid')).rows).toEqual([['one']]);

    // Writes after the restore go on in a new generation.
    await sql(id, "insert into t values ('after')");
    const bm2 = await call('POST', `/databases/${id}/bookmarks`, {});
    expect(bm2.status).toBe(201);
    const toBm = await call('POST', `/databases/${id}/restore`, { bookmark: bm.body.id });
    expect(toBm.status, JSON.stringify(toBm.body)).toBe(200);
    expect((await sql(id, 'select v from t order by rowid')).rows).toEqual([['one'], ['two']]);

    // Undo of the first restore: the state just before it.
    const undo = await call('POST', `/databases/${id}/restore`, { bookmark: back.body.undo.id });
    expect(undo.status, JSON.stringify(undo.body)).toBe(200);
    expect((await sql(id, 'select v from t order by rowid')).rows).toEqual([['one'], ['two'], ['three']]);

    // A point inside a generation that a restore began (it stands on the first one's segments).
    const toBm2 = await call('POST', `/databases/${id}/restore`, { bookmark: bm2.body.id });
    expect(toBm2.status, JSON.stringify(toBm2.body)).toBe(200);
    expect((await sql(id, 'select v from t order by rowid')).rows).toEqual([['one'], ['after']]);
    // Restores upload no snapshot: only the first generation has one of its own.
    const gens = await copies().history.generations(id);
    expect(gens.filter((g) => g.base_generation_id === null)).toHaveLength(1);

    const list = await call('GET', `/databases/${id}/bookmarks`);
    expect(list.status).toBe(200);
    expect(list.body.items.map((b: { id: string }) => b.id)).toEqual(expect.arrayContaining([bm.body.id, back.body.undo.id]));
    expect(Date.parse(list.body.window.from)).toBeLessThanOrEqual(Date.parse(t1));
    expect(gens.length).toBe(5);
  }, 60_000);

  it('branches a database at a time or now; the branch is independent; 404 and 402 as said', async () => {
    const src = await newDb('src');
    await sql(src, "create table t(v); insert into t values ('one')");
    const t1 = await pointAfter(src);
    await sql(src, "insert into t values ('two')");
    const old = await call('POST', '/databases', { name: `br1${Date.now().toString(36)}`, from: { databaseId: src, at: t1 } });
    expect(old.status, JSON.stringify(old.body)).toBe(201);
    expect((await sql(old.body.id, 'select v from t order by rowid')).rows).toEqual([['one']]);
    const now = await call('POST', '/databases', { name: `br2${Date.now().toString(36)}`, from: { databaseId: src } });
    expect(now.status, JSON.stringify(now.body)).toBe(201);
    expect((await sql(now.body.id, 'select v from t order by rowid')).rows).toEqual([['one'], ['two']]);
    await sql(now.body.id, "insert into t values ('branch only')");
    expect((await sql(src, 'select count(*) from t')).rows).toEqual([[2]]);
    // The branch ships a history of its own.
    expect((await copies().shipNow(now.body.id)).key).toMatch(new RegExp(`^database-history/${now.body.id}/`));
    const future = await call('POST', '/databases', { name: `br3${Date.now().toString(36)}`, from: { databaseId: src, at: new Date(Date.now() + 60_000).toISOString() } });
    expect(future.status).toBe(400);
    expect(future.body.code).toBe('RestorePointInFuture');
    const other = { authorization: `Bearer ${otherKey}` };
    expect((await callJson(t.baseUrl, 'POST', '/databases', { name: 'theirs', from: { databaseId: src } }, other)).status).toBe(404);
    // Past the plan's database count: 402.
    const byte = { authorization: `Bearer ${(await t.nube.services.account.createAccount({ name: 'byte-branch', plan: 'byte' })).secret}` };
    const mine: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await callJson(t.baseUrl, 'POST', '/databases', { name: `b${i}` }, byte);
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      mine.push(r.body.id);
    }
    const over = await callJson(t.baseUrl, 'POST', '/databases', { name: 'b3', from: { databaseId: mine[0] } }, byte);
    expect(over.status, JSON.stringify(over.body)).toBe(402);
  }, 60_000);

  it('answers 400 outside the window or in the future, and 404 for another account', async () => {
    const id = await newDb('bad');
    await sql(id, 'create table t(x)');
    await copies().shipNow(id);
    const future = await call('POST', `/databases/${id}/restore`, { at: new Date(Date.now() + 60_000).toISOString() });
    expect(future.status).toBe(400);
    expect(future.body.code).toBe('RestorePointInFuture');
    expect(future.body.issues?.length).toBeGreaterThan(0);
    const old = await call('POST', `/databases/${id}/restore`, { at: new Date(Date.now() - 3 * 86_400_000).toISOString() });
    expect(old.status).toBe(400);
    expect(old.body.code).toBe('RestorePointOutsideWindow');
    expect(old.body.error).toMatch(/window.*\d{4}-\d\d-\d\dT.* to \d{4}-/);
    expect((await call('POST', `/databases/${id}/restore`, { at: 'yesterday' })).status).toBe(400);
    expect((await call('POST', `/databases/${id}/restore`, {})).status).toBe(400);
    expect((await call('POST', `/databases/${id}/restore`, { bookmark: 'bkm_nope' })).status).toBe(404);
    const other = { authorization: `Bearer ${otherKey}` };
    expect((await callJson(t.baseUrl, 'POST', `/databases/${id}/restore`, { at: new Date().toISOString() }, other)).status).toBe(404);
    expect((await callJson(t.baseUrl, 'GET', `/databases/${id}/bookmarks`, undefined, other)).status).toBe(404);
    expect((await callJson(t.baseUrl, 'POST', `/databases/${id}/bookmarks`, {}, other)).status).toBe(404);
  }, 60_000);

  it('prunes generations past the window, and a delete removes the whole history', async () => {
    const id = await newDb('prune');
    await sql(id, 'create table t(x); insert into t values (1)');
    await copies().shipNow(id);
    await sql(id, 'insert into t values (2)');
    await copies().newGeneration(id);
    await sql(id, 'insert into t values (3)');
    await copies().newGeneration(id);
    const gens = await copies().history.generations(id);
    expect(gens.length).toBe(3);
    // A window starting after the third generation began: the first two go, the newest stays.
    expect(await copies().prune(id, Date.now())).toBe(2);
    const left = await copies().history.generations(id);
    expect(left.map((g) => g.id)).toEqual([gens[2].id]);
    for (const g of gens.slice(0, 2)) expect(await store().head(g.snapshot_key)).toBeNull();
    expect((await sql(id, 'select sum(x) as s from t')).rows).toEqual([[6]]);

    expect((await call('DELETE', `/databases/${id}`)).status).toBe(200);
    const keys: string[] = [];
    for await (const e of store().list(`database-history/${id}/`)) keys.push(e.key);
    expect(keys).toEqual([]);
    expect(await copies().history.generations(id)).toEqual([]);
  }, 60_000);
});
