// Issue 32 item 4: "an acknowledged change always has its entry; a crash loses none". nube runs as a
// process taking INSERTs from concurrent clients and is killed with SIGKILL mid-stream; after a restart
// on the same data, every request that got an answer has its audit entry, and the chain verifies
// (`nube audit verify`, which also names an entry removed afterwards and exits 1).
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';
import { type NubeProcess, nubeProcess } from '../helpers/nube-process.js';
import { DIALECTS } from '../helpers/pg.js';
import { callJson } from '../helpers/server.js';

const CLIENTS = 8;

describe.each(DIALECTS)('%s: kill -9 loses no audit entry of an answered call', (dialect) => {
  let n: NubeProcess;

  beforeAll(async () => {
    n = await nubeProcess(dialect, join(tmpdir(), `nube-audit-kill-${dialect}-${process.pid}`), {});
    await n.start();
  }, 300_000);
  afterAll(async () => {
    await n?.close();
  }, 60_000);

  const cli = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts', 'audit', 'verify', ...args], {
      env: { ...process.env, NUBE_DATA_DIR: n.dataDir, NUBE_LOG_LEVEL: 'silent', ...(n.databaseUrl ? { DATABASE_URL: n.databaseUrl } : {}) },
      encoding: 'utf8',
      timeout: 120_000,
    });

  it('every answered INSERT has its entry after SIGKILL and restart; the chain verifies', async () => {
    if (!n.running) await n.start(); // a retry after a failure past the kill
    const db = await n.call('POST', '/databases', { name: `kill${Date.now().toString(36)}` });
    expect(db.status).toBe(201);
    const dbId = db.body.id as string;
    expect((await n.call('POST', `/databases/${dbId}/query`, { sql: 'CREATE TABLE t (x)' })).status).toBe(200);

    const answered: string[] = [];
    let sent = 0;
    // Clients send until nube dies under them: a request in flight at the kill fails, never answered.
    const client = async (c: number) => {
      for (let i = 0; ; i++) {
        const requestId = `kill-${c}-${i}`;
        sent++;
        try {
          const r = await callJson(n.base, 'POST', `/databases/${dbId}/query`, { sql: 'INSERT INTO t VALUES (?)', args: [requestId] }, {
            authorization: `Bearer ${n.ownerKey}`,
            'x-request-id': requestId,
          });
          if (r.status === 200) answered.push(requestId);
        } catch {
          return; // the connection died with nube
        }
      }
    };
    const clients = Array.from({ length: CLIENTS }, (_, c) => client(c));
    while (answered.length < 300) await new Promise((r) => setTimeout(r, 20));
    await n.stop('SIGKILL');
    await Promise.all(clients);
    // Some requests were in flight when the process died (sent, never answered).
    expect(sent).toBeGreaterThan(answered.length);

    await n.start();
    const r = await fetch(`${n.base}/api/v2/account/audit?operation=databases.query&resourceId=${dbId}&format=ndjson`, {
      headers: { authorization: `Bearer ${n.ownerKey}` },
    });
    expect(r.status).toBe(200);
    const recorded = new Set(
      (await r.text())
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { requestId: string }).requestId),
    );
    const lost = answered.filter((id) => !recorded.has(id));
    expect(lost).toEqual([]);

    const ok = cli();
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^ok: \d+ entries/);
  }, 300_000);

  it('`nube audit verify` exits 1 naming the first removed entry', async () => {
    const store = openStore({ databaseUrl: n.databaseUrl, dataDir: n.dataDir });
    try {
      const [, , victim, next] = await store.db.selectFrom('audit_entries').select(['id', 'owner_id', 'seq']).where('owner_id', '!=', '').orderBy('seq').limit(4).execute();
      await store.db.deleteFrom('audit_entries').where('id', '=', victim!.id).execute();
      const bad = cli('--account', next!.owner_id);
      expect(bad.status).toBe(1);
      expect(bad.stderr).toContain(`entry ${next!.id} (seq ${next!.seq})`);
      expect(bad.stderr).toContain('removed');
      expect(bad.stdout).toMatch(/^BROKEN/);
    } finally {
      await store.close();
    }
  }, 120_000);
});
