import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

describe('databases export and storage allowance', () => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  beforeAll(async () => {
    t = await startNube();
    call = caller(t);
  });
  afterAll(() => t?.close());

  it('exports a valid, consistent SQLite file while writes go on, and removes the snapshot after', async () => {
    const db = await json(await call('POST', '/databases', { name: 'exported' }));
    const q = (body: unknown) => call('POST', `/databases/${db.id}/query`, body);
    await q({ sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, b BLOB)' });
    const rows = Array.from({ length: 5000 }, (_, i) => [
      i,
      `row ${i}`,
      { base64: Buffer.from([i % 256, 7]).toString('base64') },
    ]);
    expect((await q({ table: 't', columns: ['id', 'v', 'b'], rows })).status).toBe(200);

    let writing = true;
    let written = 0;
    const writer = (async () => {
      while (writing) {
        const r = await q({ sql: 'INSERT INTO t (v) VALUES (?)', args: ['during export'] });
        expect(r.status).toBe(200);
        written++;
      }
    })();
    const res = await call('GET', `/databases/${db.id}/export`);
    writing = false;
    await writer;
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/vnd.sqlite3');
    expect(res.headers.get('content-disposition')).toContain('exported.sqlite');
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(Number(res.headers.get('content-length'))).toBe(bytes.length);
    expect(bytes.subarray(0, 16).toString('latin1')).toBe('SQLite format 3\0');

    const file = join(t.dataDir, 'export-copy.sqlite');
    writeFileSync(file, bytes);
    const copy = new Database(file, { readonly: true });
    try {
      expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
      const n = (copy.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n;
      expect(n).toBeGreaterThanOrEqual(5000);
      expect(n).toBeLessThanOrEqual(5000 + written);
      expect(copy.prepare('SELECT v, b FROM t WHERE id = 300').get()).toEqual({
        v: 'row 300',
        b: Buffer.from([300 % 256, 7]),
      });
    } finally {
      copy.close();
    }
    expect(written).toBeGreaterThan(0);
    // The snapshot file was disposed of once the download ended.
    await new Promise((r) => setTimeout(r, 100));
    expect(readdirSync(join(t.dataDir, 'databases', '.exports'))).toEqual([]);
  });

  it("caps each database at what is left of the plan's storage: 402 StorageQuotaExceeded, reads and deletes still work", async () => {
    const { secret } = await t.nube.services.account.createAccount({ name: 'small', plan: 'byte' });
    const db = await json(await call('POST', '/databases', { name: 'filling' }, secret));
    const q = (body: unknown) => call('POST', `/databases/${db.id}/query`, body, secret);
    await q({ sql: 'CREATE TABLE b (x BLOB)' });
    const fill = (mb: number) =>
      q({
        sql: `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ${mb}) INSERT INTO b SELECT zeroblob(1048576) FROM c`,
      });
    // Byte allows 100 MB in all: 120 MB in one statement is refused and nothing of it is kept.
    const over = await fill(120);
    expect(over.status).toBe(402);
    expect(await json(over)).toMatchObject({ code: 'StorageQuotaExceeded', limitBytes: 100 * 1024 * 1024 });
    expect((await json(await q({ sql: 'SELECT count(*) FROM b' }))).rows).toEqual([[0]]);
    expect((await fill(60)).status).toBe(200);
    expect((await fill(50)).status).toBe(402);
    expect((await json(await q({ sql: 'SELECT count(*) FROM b' }))).rows).toEqual([[60]]);
    const got = await json(await call('GET', `/databases/${db.id}`, undefined, secret));
    expect(got.sizeBytes).toBeGreaterThan(60 * 1024 * 1024);
    expect((await q({ sql: 'DELETE FROM b' })).status).toBe(200);
    expect((await q({ sql: 'SELECT count(*) FROM b' })).status).toBe(200);
  }, 60_000);
});
