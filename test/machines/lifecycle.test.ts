// Machines end to end on both stores: tiers, validation, create, an app under the supervisor reached
// through its URL, secrets (never leaked), logs, releases and rollback, crash-loop backoff, delete.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { createRunning, getUrl, type MachineNube, nodeApp, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing, writeApp } from './helpers.js';

const SECRET = `s3cr3t-${Math.random().toString(36).slice(2)}-value`;

describe.each(DIALECTS)('%s: machines', (dialect) => {
  let t: MachineNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let m: any;
  let otherKey: string;

  beforeAll(async () => {
    t = await startMachineNube('life', dialect);
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' })).secret;
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await stopMachineNube(t);
  }, 120_000);

  it('lists the tier catalogue', async () => {
    const r = await t.call('GET', '/machines/tiers');
    expect(r.status).toBe(200);
    expect(r.body.tiers.map((x: { name: string }) => x.name)).toEqual(['nano', 'micro', 'small', 'medium']);
    const nano = r.body.tiers[0];
    expect(nano).toMatchObject({ canBuild: false, reservedMonthlyMxn: null });
    expect(r.body.tiers[1]).toMatchObject({ name: 'micro', canBuild: true, vcpus: 0.5, memoryMB: 512 });
  });

  it('refuses bad input with 400 and issues', async () => {
    for (const body of [
      {},
      { tier: 'micro', diskAddonsGB: 150 },
      { tier: 'micro', diskAddonsGB: 2100 },
      { tier: 'micro', name: 'x'.repeat(65) },
      { tier: 'huge' },
      { tier: 'nano', cpuMode: 'reserved' },
      { tier: 'micro', cpuMode: 'dedicated' },
    ]) {
      const r = await t.call('POST', '/machines', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.issues?.length, JSON.stringify(body)).toBeGreaterThan(0);
    }
    expect((await t.call('POST', '/machines', { tier: 'micro', template: 'nope' })).status).toBe(400);
    expect((await t.call('POST', '/machines', { tier: 'micro', fromSandboxId: 'sbx_nosuch' })).status).toBe(404);
  });

  it('creates an always-on machine whose box never expires', async () => {
    m = await createRunning(t, { tier: 'micro', name: 'web', diskAddonsGB: 100 });
    expect(m).toMatchObject({ name: 'web', tier: 'micro', cpuMode: 'shared', diskAddonsGB: 100, monthlyMxn: 119 + 49, url: null });
    const sbx = await t.call('GET', `/sandboxes/${m.sandboxId}`);
    expect(sbx.body).toMatchObject({ status: 'running', expiresAt: null, timeoutSeconds: 0 });
    // The box has the tier's limits.
    expect(sbx.body.limits ?? { cpus: sbx.body.cpus, memoryMb: sbx.body.memoryMb }).toBeTruthy();
    const info = await t.nube.services.sandboxes.core.runtime.get(m.sandboxId.replace('_', '-'));
    expect(info?.limits).toMatchObject({ cpus: 0.5, memoryMb: 512 });
    // No clock to push: extend changes nothing, idle is refused.
    expect((await t.call('POST', `/sandboxes/${m.sandboxId}/idle`, { suspendOnIdle: true, idleTtlSeconds: 60 })).status).toBe(409);
    const list = await t.call('GET', '/machines');
    expect(list.body.machines.map((x: { id: string }) => x.id)).toContain(m.id);
  }, 180_000);

  it("answers 404 for another owner's machine, on every operation", async () => {
    const id = m.id;
    for (const [method, path, body] of [
      ['GET', `/machines/${id}`],
      ['DELETE', `/machines/${id}`],
      ['POST', `/machines/${id}/restart`],
      ['GET', `/machines/${id}/secrets`],
      ['POST', `/machines/${id}/secrets`, { A: 'b' }],
      ['GET', `/machines/${id}/logs`],
      ['GET', `/machines/${id}/releases`],
      ['POST', `/machines/${id}/releases`, {}],
      ['POST', `/machines/${id}/rollback`, { releaseId: 'rel_x' }],
    ] as [string, string, unknown?][]) {
      const r = await t.call(method, path, body, otherKey);
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    expect((await t.call('GET', '/machines', undefined, otherKey)).body.machines).toEqual([]);
  });

  it('runs the app under the supervisor and serves it on its URL; restart is quick', async () => {
    await writeApp(t, m.sandboxId, nodeApp('v1'));
    const r = await t.call('POST', `/machines/${m.id}/restart`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const g = await t.call('GET', `/machines/${m.id}`);
    expect(g.body.url).toMatch(/^http:\/\/8080-sbx-[0-9a-z]+\.sandbox\.localhost:\d+$/);
    m = g.body;
    expect(JSON.parse((await waitServing(t, m.url)).body)).toEqual({ version: 'v1', secretLength: 0 });
    const t0 = performance.now();
    expect((await t.call('POST', `/machines/${m.id}/restart`)).status).toBe(200);
    await waitServing(t, m.url);
    console.log(`[machines ${dialect}] restart to serving: ${Math.round(performance.now() - t0)} ms`);
  }, 120_000);

  it('keeps secrets sealed: names only, applied at restart, never in the store, logs or answers', async () => {
    const s = await t.call('POST', `/machines/${m.id}/secrets?restart=false`, { SECRET_TOKEN: SECRET, OTHER: 'x' });
    expect(s.body).toEqual({ secretNames: ['OTHER', 'SECRET_TOKEN'], pendingRestart: true });
    expect((await t.call('GET', `/machines/${m.id}/secrets`)).body).toEqual({ secretNames: [], inVault: ['OTHER', 'SECRET_TOKEN'] });
    expect((await t.call('GET', `/machines/${m.id}`)).body.pendingRestart).toBe(true);
    expect(JSON.parse((await getUrl(t, m.url)).body).secretLength).toBe(0);
    expect((await t.call('POST', `/machines/${m.id}/restart`)).status).toBe(200);
    await waitServing(t, m.url, (b) => JSON.parse(b).secretLength === SECRET.length);
    expect((await t.call('GET', `/machines/${m.id}/secrets`)).body).toEqual({ secretNames: ['OTHER', 'SECRET_TOKEN'], inVault: ['OTHER', 'SECRET_TOKEN'] });
    // PUT is the same operation; restart (default) applies at once.
    const put = await callPut(t, `/machines/${m.id}/secrets`, { OTHER: 'y' });
    expect(put).toEqual({ secretNames: ['OTHER', 'SECRET_TOKEN'], pendingRestart: false });
    await waitServing(t, m.url);
    expect((await t.call('POST', `/machines/${m.id}/secrets`, { 'BAD-NAME': 'x' })).status).toBe(400);
    expect((await t.call('POST', `/machines/${m.id}/secrets`, { BIG: 'x'.repeat(65_537) })).status).toBe(400);
    const logs = await t.call('GET', `/machines/${m.id}/logs?lines=10000`);
    expect(logs.body.lines.join('\n')).not.toContain(SECRET);
    expect(t.answers.join('\n')).not.toContain(SECRET);
    expect(await storeText(t, dialect)).not.toContain(SECRET);
  }, 120_000);

  it('reads logs: the last lines, a substring or a regular expression, with a time limit', async () => {
    await getUrl(t, m.url, '/hello-logs');
    const end = Date.now() + 10_000;
    let lines: string[] = [];
    while (Date.now() < end) {
      lines = (await t.call('GET', `/machines/${m.id}/logs?grep=hello-logs`)).body.lines;
      if (lines.length > 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(lines.length).toBe(1);
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT[\d:]+Z request \/hello-logs$/);
    const all = (await t.call('GET', `/machines/${m.id}/logs`)).body.lines as string[];
    expect(all.some((l) => l.includes('[nube] starting: node'))).toBe(true);
    expect(all.some((l) => l.includes('app v1 booting'))).toBe(true);
    expect((await t.call('GET', `/machines/${m.id}/logs?lines=2`)).body.lines).toHaveLength(2);
    const re = await t.call('GET', `/machines/${m.id}/logs?grep=${encodeURIComponent('/request \\/hel+o-LOGS$/i')}`);
    expect(re.body.lines).toHaveLength(1);
    expect((await t.call('GET', `/machines/${m.id}/logs?grep=${encodeURIComponent('/(/')}`)).status).toBe(400);
    expect((await t.call('GET', `/machines/${m.id}/logs?lines=10001`)).status).toBe(400);
    expect((await t.call('GET', `/machines/${m.id}/logs?lines=0`)).status).toBe(400);
  }, 60_000);

  it('publishes releases and rolls back without a rebuild; a crash loop backs off and shows in the logs', async () => {
    const r1 = await t.call('POST', `/machines/${m.id}/releases`, { message: 'first' });
    expect(r1.status, JSON.stringify(r1.body)).toBe(200);
    expect(r1.body).toMatchObject({ version: 1, message: 'first', source: 'manual', status: 'ready', current: true });
    expect(r1.body.sizeBytes).toBeGreaterThan(0);
    await writeApp(t, m.sandboxId, nodeApp('v2'));
    await t.call('POST', `/machines/${m.id}/restart`);
    await waitServing(t, m.url, (b) => JSON.parse(b).version === 'v2');
    const r2 = await t.call('POST', `/machines/${m.id}/releases`);
    expect(r2.body).toMatchObject({ version: 2, message: null, current: true });
    // A broken tree: the app dies at once, the supervisor restarts it with a growing wait.
    await writeApp(t, m.sandboxId, { '/app/nube.json': JSON.stringify({ start: 'echo dying; exit 3' }) });
    await t.call('POST', `/machines/${m.id}/restart`);
    const end = Date.now() + 20_000;
    let text = '';
    while (Date.now() < end && !text.includes('crash loop')) {
      text = (await t.call('GET', `/machines/${m.id}/logs?grep=exited`)).body.lines.join('\n');
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(text).toContain('app exited with code 3; restarting in 1s');
    expect(text).toContain('app exited with code 3; crash loop: restarting in 2s');
    // Back to release 1: its tree (no nube.json) serves v1, within seconds.
    const t0 = performance.now();
    const rb = await t.call('POST', `/machines/${m.id}/rollback`, { releaseId: r1.body.id });
    expect(rb.body).toEqual({ ok: true, machineId: m.id, releaseId: r1.body.id, previousReleaseId: r2.body.id });
    await waitServing(t, m.url, (b) => JSON.parse(b).version === 'v1');
    console.log(`[machines ${dialect}] rollback to serving: ${Math.round(performance.now() - t0)} ms`);
    const list = await t.call('GET', `/machines/${m.id}/releases`);
    expect(list.body.releases.map((x: { version: number; current: boolean }) => [x.version, x.current])).toEqual([
      [2, false],
      [1, true],
    ]);
    expect((await t.call('POST', `/machines/${m.id}/rollback`, { releaseId: 'rel_nosuch' })).status).toBe(400);
    expect((await t.call('POST', `/machines/${m.id}/rollback`, {})).status).toBe(400);
  }, 120_000);

  it('deletes idempotently, records the prorated charge and destroys the box', async () => {
    const usage = t.nube.services.machines.core.deps.usage;
    const owner = await ownerOf(t);
    const before = await usage.counter(owner, 'machineChargesCentavos');
    expect((await t.call('DELETE', `/machines/${m.id}`)).body).toEqual({ ok: true });
    expect((await t.call('DELETE', `/machines/${m.id}`)).body).toEqual({ ok: true });
    const after = await usage.counter(owner, 'machineChargesCentavos');
    expect(after).toBeGreaterThan(before);
    expect((await t.call('GET', `/machines/${m.id}`)).status).toBe(404);
    expect((await t.call('GET', `/sandboxes/${m.sandboxId}`)).status).toBe(404);
    expect((await t.call('GET', `/machines/${m.id}/releases`)).status).toBe(404);
    expect((await t.call('GET', '/machines')).body.machines.map((x: { id: string }) => x.id)).not.toContain(m.id);
  }, 60_000);
});

async function ownerOf(t: MachineNube): Promise<string> {
  const me = await t.call('GET', '/account');
  return me.body.id ?? me.body.account?.id;
}

async function callPut(t: MachineNube, path: string, body: unknown) {
  const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  t.answers.push(text);
  return JSON.parse(text);
}

/** Everything the metadata store holds, as text: the SQLite files' bytes, or every PostgreSQL row. */
async function storeText(t: MachineNube, dialect: string): Promise<string> {
  if (dialect === 'sqlite') {
    const { readdirSync } = await import('node:fs');
    return readdirSync(t.dataDir)
      .filter((f) => /\.(db|sqlite)(-wal|-shm)?$/.test(f))
      .map((f) => readFileSync(`${t.dataDir}/${f}`).toString('latin1'))
      .join('\n');
  }
  const { sql } = await import('kysely');
  const db = t.nube.services.machines.core.repo.db;
  const tables = await sql<{ tablename: string }>`select tablename from pg_tables where schemaname = 'public'`.execute(db);
  const parts: string[] = [];
  for (const { tablename } of tables.rows) {
    const rows = await sql<{ t: string }>`select t::text as t from ${sql.table(tablename)} t`.execute(db);
    parts.push(...rows.rows.map((r) => r.t));
  }
  return parts.join('\n');
}
