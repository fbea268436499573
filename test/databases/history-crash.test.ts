import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { materialize } from '../../src/areas/databases/history/materialize.js';
import { type S3rverHandle, startS3rver } from '../../src/blob/s3rver-harness.js';
import { createTempDatabase } from '../helpers/pg.js';
import { exited, freePort, spawnNube } from '../helpers/process.js';
import { callJson, newOwnerKey, startNube } from '../helpers/server.js';

// Crash safety of shipping (issue 35): a nube process killed (SIGKILL) after a WAL segment reached the
// blob store and before any row named it. The history as indexed (the state before that segment) is
// still whole and restorable, the orphan object is never read, and the restarted node ships on.
// SQLite metadata with the local blob store, and PostgreSQL with S3 (s3rver).
describe.each([
  ['sqlite', 'local'],
  ['postgres', 's3'],
] as const)('database history: kill -9 between segment upload and its index (%s, %s)', (dialect, backend) => {
  let s3: S3rverHandle | undefined;
  let s3dir: string | undefined;
  let pg: { url: string; drop(): Promise<void> } | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'nube-walcrash-'));

  beforeAll(async () => {
    if (backend === 's3') {
      s3dir = mkdtempSync(join(tmpdir(), 'nube-walcrash-s3-'));
      s3 = await startS3rver(s3dir, ['nube-wal']);
    }
    if (dialect === 'postgres') pg = await createTempDatabase('walcrash');
  }, 60_000);
  afterAll(async () => {
    await s3?.stop();
    await pg?.drop();
    if (s3dir) rmSync(s3dir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('leaves the indexed state readable and ships on after a restart', async () => {
    const ownerKey = newOwnerKey();
    const env: Record<string, string> = {
      NUBE_DATA_DIR: dataDir,
      NUBE_OWNER_KEY: ownerKey,
      NUBE_LOG_LEVEL: 'silent',
      NUBE_DATABASE_SHIP_MS: '100',
      ...(pg ? { DATABASE_URL: pg.url } : {}),
      ...(s3
        ? {
            NUBE_BLOB_BACKEND: 's3',
            NUBE_S3_ENDPOINT: s3.endpoint,
            NUBE_S3_BUCKET: 'nube-wal',
            NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
            NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
          }
        : {}),
    };
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const auth = { authorization: `Bearer ${ownerKey}` };
    const child = await spawnNube({ ...env, NUBE_PORT: String(port), NUBE_DATABASE_SHIP_FAULT: 'after-segment-upload' }, base);
    let id: string;
    try {
      const made = await callJson(base, 'POST', '/databases', { name: 'crash' }, auth);
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      id = made.body.id;
      // The generation (snapshot and segment 0) is shipped and indexed; the fault fires at the next segment.
      await sleep(1500);
      const w = await callJson(base, 'POST', `/databases/${id}/query`, { sql: "create table t(x); insert into t values ('acked')" }, auth);
      expect(w.status, JSON.stringify(w.body)).toBe(200);
      await exited(child);
      expect(child.signalCode).toBe('SIGKILL');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }

    const t = await startNube({ dataDir, env });
    try {
      const copies = t.nube.services.databases.copies;
      const store = t.nube.services.files.stores.at();
      const [gen0] = await copies.history.generations(id);
      const indexed = await copies.history.segments(gen0.id);
      expect(indexed.map((s) => s.seq)).toEqual([0]);
      const objects: string[] = [];
      for await (const e of store.list(`database-history/${id}/${gen0.id}/`)) objects.push(e.key);
      // The uploaded segment is there, named by no row.
      expect(objects.length).toBe(3);
      expect(objects.filter((k) => !k.endsWith('snapshot.sqlite.gz') && k !== indexed[0].key)).toHaveLength(1);
      // The indexed state is whole: a database without the table (the write came after).
      const old = join(dataDir, 'old.sqlite');
      await materialize(store, copies.history, id, { key: indexed[0].key }, old);
      const { DatabaseSync } = await import('@photostructure/sqlite');
      const db = new DatabaseSync(old, { readOnly: true });
      expect(db.prepare('pragma integrity_check').get()).toEqual({ integrity_check: 'ok' });
      expect(db.prepare("select count(*) as n from sqlite_schema where name = 't'").get()).toEqual({ n: 0 });
      db.close();

      // The node's own file kept the acknowledged write, and shipping goes on (a new generation).
      const r = await callJson(t.baseUrl, 'POST', `/databases/${id}/query`, { sql: 'select x from t' }, t.auth);
      expect(r.body.rows).toEqual([['acked']]);
      const head = await copies.shipNow(id);
      const now = join(dataDir, 'now.sqlite');
      await materialize(store, copies.history, id, { key: head.key! }, now);
      const db2 = new DatabaseSync(now, { readOnly: true });
      expect(db2.prepare('select x from t').all()).toEqual([{ x: 'acked' }]);
      db2.close();
    } finally {
      await t.close();
    }
  }, 180_000);
});
