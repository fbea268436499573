// Backups of runspec.dataPaths on a short interval (the daily timer, configurable): SQLite through its
// backup API and plain files with the app paused, listed with their consistency, restored on demand;
// and a machine outlives a restart of nube: its app keeps serving, its timer keeps running.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { createRunning, getUrl, type MachineNube, restartMachineNube, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing, writeApp } from './helpers.js';

const CA_DIR = mkdtempSync(join(tmpdir(), 'nube-ca-'));
const ENV = { NUBE_MACHINE_BACKUP_INTERVAL_S: '5', NUBE_EXTRA_CA_BUNDLE: join(CA_DIR, 'extra.pem') };
const APP = {
  '/app/nube.json': JSON.stringify({ start: 'node server.js', port: 8080, dataPaths: ['/data'] }),
  '/app/server.js': `require('http').createServer((q, s) => s.end(require('fs').readFileSync('/data/note.txt', 'utf8').trim())).listen(8080, '0.0.0.0');\n`,
};
const sqlite = (stmt: string) => `python3 -c "import sqlite3; c=sqlite3.connect('/data/app.sqlite'); r=c.execute(\\"${stmt}\\").fetchall(); c.commit(); print(r)"`;

describe.each(DIALECTS)('%s: machine backups and restarts of nube', (dialect) => {
  let t: MachineNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let m: any;
  const exec = async (command: string) => (await t.call('POST', `/sandboxes/${m.sandboxId}/exec`, { command })).body;

  beforeAll(async () => {
    // An operator's extra CA (a TLS-inspecting proxy's): the boxes must trust it.
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=nube-test-proxy-ca', '-days', '1', '-keyout', join(CA_DIR, 'k.pem'), '-out', ENV.NUBE_EXTRA_CA_BUNDLE], { stdio: 'ignore' });
    t = await startMachineNube('backups', dialect, ENV);
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await stopMachineNube(t);
  }, 120_000);

  it('backs up the data paths on its timer: SQLite by its backup API, files with the app paused', async () => {
    m = await createRunning(t, { tier: 'small' });
    await writeApp(t, m.sandboxId, APP);
    await exec(`mkdir -p /data && echo v1 > /data/note.txt && ${sqlite("create table t(x)")} && ${sqlite("insert into t values ('one')")}`);
    expect((await t.call('POST', `/machines/${m.id}/restart`)).status).toBe(200);
    m = (await t.call('GET', `/machines/${m.id}`)).body;
    await waitServing(t, m.url, (b) => b === 'v1');
    // NUBE_EXTRA_CA_BUNDLE: in the box's trust store, and named to the app's Node and Python.
    const line = readFileSync(ENV.NUBE_EXTRA_CA_BUNDLE, 'utf8').split('\n')[1]!;
    const ca = await exec(`grep -c -F '${line}' /etc/ssl/certs/ca-certificates.crt; tr '\\0' '\\n' < /proc/$(cat /opt/nube/app.pgid)/environ | grep -E '^(NODE_EXTRA_CA_CERTS|SSL_CERT_FILE)=' | sort`);
    expect(ca.stdout).toBe('1\nNODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/nube-extra.crt\nSSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n');
    const end = Date.now() + 60_000;
    // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
    let done: any;
    while (Date.now() < end && !done) {
      const l = await t.call('GET', `/machines/${m.id}/backups`);
      done = l.body.backups.find((b: { status: string }) => b.status === 'completed');
      if (!done) await new Promise((r) => setTimeout(r, 500));
    }
    expect(done).toMatchObject({ consistency: 'consistent', method: 'app-paused', paths: ['/data'], error: null });
    expect(done.sizeBytes).toBeGreaterThan(0);
    expect(Date.parse(done.expiresAt) - Date.parse(done.createdAt)).toBe(7 * 86_400_000);
    // The app was only paused: it serves again.
    await waitServing(t, m.url, (b) => b === 'v1');
    m.backupId = done.id;
  }, 120_000);

  it('restores a backup: files and the SQLite database come back, the app restarts', async () => {
    await exec(`echo v2 > /data/note.txt && ${sqlite("insert into t values ('two')")}`);
    expect((await exec(sqlite('select count(*) from t'))).stdout.trim()).toBe('[(2,)]');
    const r = await t.call('POST', `/machines/${m.id}/backups/${m.backupId}/restore`);
    expect(r.body, JSON.stringify(r.body)).toEqual({ ok: true, machineId: m.id, backupId: m.backupId, restoredPaths: ['/data'] });
    await waitServing(t, m.url, (b) => b === 'v1');
    expect((await exec(sqlite('select x from t'))).stdout.trim()).toBe("[('one',)]");
    expect((await t.call('POST', `/machines/${m.id}/backups/bak_nosuch/restore`)).status).toBe(404);
  }, 120_000);

  it('keeps serving across a restart of nube; its supervisor is re-adopted, and restarted if it died', async () => {
    t = await restartMachineNube(t, ENV);
    const g = await t.call('GET', `/machines/${m.id}`);
    expect(g.body).toMatchObject({ status: 'running', url: expect.stringContaining('8080-') });
    m.url = g.body.url;
    await waitServing(t, m.url, (b) => b === 'v1');
    // The supervisor dies (as if the box had been restarted): the next start of nube starts it again.
    const sup = (await t.call('GET', `/sandboxes/${m.sandboxId}/bg`)).body.processes.find((x: { state: string }) => x.state === 'running');
    await t.call('DELETE', `/sandboxes/${m.sandboxId}/bg/${sup.execId}`);
    expect((await getUrl(t, m.url).catch(() => ({ status: 0 }))).status).not.toBe(200);
    t = await restartMachineNube(t, ENV);
    const url = (await t.call('GET', `/machines/${m.id}`)).body.url;
    await waitServing(t, url, (b) => b === 'v1', 60_000);
    // Deleting removes the backups too.
    expect((await t.call('DELETE', `/machines/${m.id}`)).status).toBe(200);
    expect((await t.call('GET', `/machines/${m.id}/backups`)).status).toBe(404);
  }, 180_000);
});
