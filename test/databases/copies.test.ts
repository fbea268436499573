import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

// One node (SQLite and PostgreSQL metadata): every change of a database is shipped to the blob store
// (the local one here) within the ship interval as a WAL segment after a snapshot, the row names the
// latest one and the size, and a deleted database's history goes with it.
describe.each(DIALECTS)('database history in the blob store (%s)', (dialect) => {
  let t: TestNube;
  const call = (method: string, path: string, body?: unknown) => callJson(t.baseUrl, method, path, body, t.auth);
  const rowOf = (id: string) =>
    t.nube.deps.store.db.selectFrom('databases').select(['copy_key', 'copy_at', 'size_bytes']).where('id', '=', id).executeTakeFirstOrThrow();
  const store = () => t.nube.services.files.stores.at();

  beforeAll(async () => {
    t = await startNube({ dialect, env: { NUBE_DATABASE_SHIP_MS: '100' } });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
  });

  /** Waits until the latest copy began after `sentAt` and no further copy is due: it holds every write acknowledged by then. */
  async function copied(id: string, sentAt: number): Promise<{ copy_key: string | null; copy_at: number | string | null; size_bytes: number | string }> {
    const copies = t.nube.services.databases.copies;
    const until = Date.now() + 15_000;
    for (;;) {
      const r = await rowOf(id);
      if (r.copy_at !== null && Number(r.copy_at) >= sentAt && !copies.pending(id)) return r;
      if (Date.now() > until) throw new Error(`no copy of ${id} after ${sentAt}: ${JSON.stringify(r)} ${JSON.stringify(copies.stats)}`);
      await new Promise((res) => setTimeout(res, 25));
    }
  }

  it('ships a database soon after each change, one segment per change, and removes its history on delete', async () => {
    const made = await call('POST', '/databases', { name: `cp${Date.now().toString(36)}` });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const id = made.body.id as string;
    expect((await call('POST', `/databases/${id}/query`, { sql: 'create table t(x)' })).status).toBe(200);
    const sent1 = Date.now();
    expect((await call('POST', `/databases/${id}/query`, { sql: 'insert into t values (1), (2)' })).status).toBe(200);
    const first = await copied(id, sent1);
    expect(first.copy_key).toMatch(new RegExp(`^database-history/${id}/gen_`));
    expect(Number(first.size_bytes)).toBeGreaterThan(0);
    const gens = await t.nube.services.databases.copies.history.generations(id);
    expect(gens.length).toBe(1);
    const got = await store().get(gens[0].snapshot_key);
    const bytes = gunzipSync(Buffer.concat(await got.stream.toArray()));
    expect(bytes.subarray(0, 15).toString()).toBe('SQLite format 3');

    // Another change: a new segment is named; the earlier objects stay (they are the history).
    const sent2 = Date.now();
    expect((await call('POST', `/databases/${id}/query`, { sql: 'insert into t values (3)' })).status).toBe(200);
    const second = await copied(id, sent2);
    expect(second.copy_key).not.toBe(first.copy_key);
    expect(await store().head(first.copy_key!)).not.toBeNull();
    const keys: string[] = [];
    for await (const e of store().list(`database-history/${id}/`)) keys.push(e.key);
    expect(keys).toContain(second.copy_key);

    // Reads alone ship nothing.
    const stats = t.nube.services.databases.copies.stats;
    const before = stats.shipped;
    for (let i = 0; i < 5; i++) expect((await call('POST', `/databases/${id}/query`, { sql: 'select count(*) from t' })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect(stats.shipped, JSON.stringify(stats)).toBe(before);
    const latest = await rowOf(id);
    expect(latest.copy_key).toBe(second.copy_key);

    expect((await call('DELETE', `/databases/${id}`)).status).toBe(200);
    expect(await store().head(latest.copy_key!)).toBeNull();
    const left: string[] = [];
    for await (const e of store().list(`database-history/${id}/`)) left.push(e.key);
    expect(left).toEqual([]);
  }, 60_000);

  it('restores a database whose file is missing at start from its latest copy', async () => {
    const made = await call('POST', '/databases', { name: `lost${Date.now().toString(36)}` });
    expect(made.status).toBe(201);
    const id = made.body.id as string;
    const sent = Date.now();
    expect((await call('POST', `/databases/${id}/query`, { sql: 'create table t(x); insert into t values (7), (8)' })).status).toBe(200);
    await copied(id, sent);
    // The node stops and its database file is lost (the blob directory and metadata remain).
    const url = t.nube.deps.config.databaseUrl;
    await t.nube.close();
    for (const f of ['', '-wal', '-shm']) rmSync(join(t.dataDir, 'databases', `${id}.sqlite${f}`), { force: true });
    const again = await startNube({ dataDir: t.dataDir, env: { NUBE_OWNER_KEY: t.ownerKey, NUBE_DATABASE_SHIP_MS: '100', ...(url ? { DATABASE_URL: url } : {}) } });
    try {
      const r = await callJson(again.baseUrl, 'POST', `/databases/${id}/query`, { sql: 'select x from t order by x' }, again.auth);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(JSON.stringify(r.body.rows)).toMatch(/7.*8/);
    } finally {
      await again.close();
    }
  }, 60_000);
});
