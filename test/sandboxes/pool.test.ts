// The warm pool through the API on both drivers: a create answered from the pool gets the caller's
// id (hostname), env, metadata, limits and timers; nothing of an earlier holder reaches the next one;
// the pool refills; a restart leaves no pooled sandbox behind (a clean stop destroys them, a crash
// leaves them to the next start's reconcile).
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../../src/platform/auth.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until } from './helpers.js';

const POOL_ENV = {
  NUBE_SANDBOX_POOL: '1',
  NUBE_SANDBOX_POOL_MAX: '2',
  // This file's own bridge and cgroup parent (the subnet given to the warm-pool work).
  NUBE_SANDBOX_BRIDGE: 'nubewp0:10.105.0.1/16',
  NUBE_SANDBOX_CGROUP: 'nube-wp',
};

const ready = async (t: SandboxNube) => (await t.nube.services.sandboxes.core.pool.status()).keys.find((k) => k.key === 'template:base');

async function poolFilled(t: SandboxNube): Promise<void> {
  const k = await until(() => ready(t), (k) => (k?.ready ?? 0) >= 1, 120_000);
  expect(k?.ready).toBeGreaterThanOrEqual(1);
}

describe.each(DRIVERS)('%s: warm pool', (driver) => {
  let t: SandboxNube;
  const env = { ...POOL_ENV, NUBE_SANDBOX_DRIVER: driver };

  beforeAll(async () => {
    t = await startSandboxNube('pool', env);
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  let firstId = '';

  it('a first create misses and starts the pool; the next one is a hit with its own env, metadata and hostname', async () => {
    const miss = await t.call('POST', '/sandboxes', { timeoutSeconds: 120 });
    expect(miss.status).toBe(200);
    expect((await ready(t))?.misses).toBe(1);
    await poolFilled(t);
    const pooledIds = (await t.nube.services.sandboxes.core.runtime.list()).map((s) => s.id);

    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 300, env: { SECRET: 'first' }, metadata: { holder: 'a' } });
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ status: 'running', metadata: { holder: 'a' }, timeoutSeconds: 300 });
    firstId = c.body.id;
    // The hit: the pooled sandbox was started under the id the record now has.
    expect(pooledIds).toContain(firstId.replace('_', '-'));
    expect((await ready(t))?.hits).toBe(1);
    // Two creations within seconds: the pool aims past its size, up to its max.
    expect((await ready(t))?.target).toBe(2);
    expect((await t.nube.services.sandboxes.core.pool.status()).memoryCap).toBeGreaterThan(2);
    expect(Date.parse(c.body.expiresAt)).toBeGreaterThan(Date.now() + 250_000);
    const logs = await t.call('POST', `/sandboxes/${firstId}/logs`);
    expect(logs.body.events[0]).toMatchObject({ event: 'created', warmPool: true });

    const e = await t.call('POST', `/sandboxes/${firstId}/exec`, { command: 'echo "$SECRET"; hostname; cat /etc/hostname' });
    const host = firstId.replace('_', '-');
    expect(e.body).toMatchObject({ exitCode: 0, stdout: `first\n${host}\n${host}\n` });

    // What this holder leaves behind: a file, a process, a network policy.
    await t.call('POST', `/sandboxes/${firstId}/exec`, { command: 'echo mine > /root/mark; echo mine > /tmp/mark' });
    expect((await t.call('POST', `/sandboxes/${firstId}/bg`, { command: 'exec sleep 1000' })).status).toBe(200);
    const count = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 100[0]'; true";
    // (gVisor's bg wrapper, nube-run, carries the command line too.)
    const seen = await until(() => t.call('POST', `/sandboxes/${firstId}/exec`, { command: count }), (r) => Number(r.body.stdout) >= 1, 10_000);
    expect(Number(seen.body.stdout)).toBeGreaterThanOrEqual(1);
    expect((await t.call('POST', `/sandboxes/${firstId}/network-policy`, { internet: false })).status).toBe(200);
    await t.call('DELETE', `/sandboxes/${miss.body.id}`);
  }, 240_000);

  it('refills, and the next holder sees nothing of the first (never reused)', async () => {
    await poolFilled(t);
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 60, env: { OTHER: 'second' } });
    expect(c.status).toBe(200);
    expect(c.body.id).not.toBe(firstId);
    expect((await ready(t))?.hits).toBe(2);
    const sx = (command: string) => t.call('POST', `/sandboxes/${c.body.id}/exec`, { command });
    expect((await sx('echo "[$SECRET][$OTHER]"')).body.stdout).toBe('[][second]\n');
    expect((await sx('ls /root/mark /tmp/mark')).body.exitCode).not.toBe(0);
    // The first holder's `sleep 1000` is not among this sandbox's processes.
    const procs = await sx("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 100[0]'; true");
    expect(procs.body.stdout.trim()).toBe('0');
    const rt = await t.call('POST', `/sandboxes/${c.body.id}/runtime`);
    expect(rt.body.hostname).toBe(c.body.id.replace('_', '-'));
    // The second holder's network is the default one, not the first holder's `internet: false`.
    const core = t.nube.services.sandboxes.core;
    const info = await core.runtime.get(c.body.id.replace('_', '-'));
    expect(info?.state).toBe('running');
    if (driver === 'namespaces') {
      const rules = await (core.runtime as unknown as { describeNetworkPolicy(id: string): Promise<string> }).describeNetworkPolicy(
        c.body.id.replace('_', '-'),
      );
      expect(rules).not.toContain('0.0.0.0/0');
    }
    await t.call('DELETE', `/sandboxes/${firstId}`);
    await t.call('DELETE', `/sandboxes/${c.body.id}`);
  }, 240_000);

  it("a hit with limits (a machine's tier) gets them in its cgroup", async () => {
    await poolFilled(t);
    const core = t.nube.services.sandboxes.core;
    const one = await t.call('POST', '/sandboxes', { timeoutSeconds: 60 });
    const ownerId = (await core.repo.get(one.body.id))!.owner_id;
    await t.call('DELETE', `/sandboxes/${one.body.id}`);
    await poolFilled(t);
    const p: Principal = { scheme: 'owner', ownerId, plan: 'tera' };
    const s = await t.nube.services.sandboxes.create(p, {
      template: 'base',
      timeoutSeconds: 60,
      suspendOnIdle: false,
      limits: { cpus: 0.5, memoryMb: 300 },
    });
    const events = JSON.parse((await core.repo.get(s.id))!.events) as { warmPool?: boolean }[];
    expect(events[0]?.warmPool).toBe(true);
    const rt = await t.call('POST', `/sandboxes/${s.id}/runtime`);
    expect(rt.body.limits).toMatchObject({ cpus: 0.5, memoryMB: 300 });
    // The cgroup says so too (gVisor's host cgroup carries 64 MB of headroom for the sentry).
    const mem = await t.call('POST', `/sandboxes/${s.id}/exec`, { command: 'true' });
    expect(mem.body.exitCode).toBe(0);
    const { readFileSync } = await import('node:fs');
    const rid = s.id.replace('_', '-');
    const v1 = `/sys/fs/cgroup/memory/nube-wp/${rid}/memory.limit_in_bytes`;
    const v2 = `/sys/fs/cgroup/nube-wp/${rid}/memory.max`;
    const limit = Number(readFileSync((await import('node:fs')).existsSync(v1) ? v1 : v2, 'utf8').trim());
    expect(limit).toBe((driver === 'gvisor' ? 364 : 300) * 1024 * 1024);
    await t.call('DELETE', `/sandboxes/${s.id}`);
  }, 240_000);

  it('a hit writes its record once, already running; a failed claim starts one under the same id; a failed record write destroys the claimed sandbox', async () => {
    const core = t.nube.services.sandboxes.core;
    type Repo = { insert(r: { id: string; status: string }): Promise<void>; update(id: string, patch: object): Promise<void> };
    const repo = core.repo as unknown as Repo;
    const insert = repo.insert.bind(repo);
    const update = repo.update.bind(repo);
    const inserted: { id: string; status: string }[] = [];
    const updated: string[] = [];
    repo.insert = async (r) => {
      inserted.push({ id: r.id, status: r.status });
      return insert(r);
    };
    repo.update = async (id, patch) => {
      updated.push(id);
      return update(id, patch);
    };
    try {
      await poolFilled(t);
      const hits = (await ready(t))!.hits;
      const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 60, env: { WHO: 'once' } });
      expect(c.status).toBe(200);
      expect((await ready(t))?.hits).toBe(hits + 1);
      expect(inserted.filter((r) => r.id === c.body.id)).toEqual([{ id: c.body.id, status: 'running' }]);
      expect(updated).not.toContain(c.body.id);
      expect(Date.parse(c.body.expiresAt)).toBeGreaterThan(Date.now() + 50_000);
      const e = await t.call('POST', `/sandboxes/${c.body.id}/exec`, { command: 'echo "$WHO"' });
      expect(e.body).toMatchObject({ exitCode: 0, stdout: 'once\n' });
      await t.call('DELETE', `/sandboxes/${c.body.id}`);

      // The driver refuses the claim: the pooled sandbox goes, one is started the usual way, same id.
      await poolFilled(t);
      const rt = core.runtime as unknown as { claim: (...a: unknown[]) => Promise<unknown> };
      const claim = rt.claim;
      rt.claim = async () => {
        throw new Error('claim refused (test)');
      };
      let fallback: Awaited<ReturnType<SandboxNube['call']>>;
      try {
        fallback = await t.call('POST', '/sandboxes', { timeoutSeconds: 60, env: { WHO: 'fallback' } });
      } finally {
        rt.claim = claim;
      }
      expect(fallback.status).toBe(200);
      expect(fallback.body.status).toBe('running');
      expect(inserted.filter((r) => r.id === fallback.body.id)).toEqual([{ id: fallback.body.id, status: 'starting' }]);
      const f = await t.call('POST', `/sandboxes/${fallback.body.id}/exec`, { command: 'echo "$WHO"; hostname' });
      expect(f.body).toMatchObject({ exitCode: 0, stdout: `fallback\n${fallback.body.id.replace('_', '-')}\n` });
      await t.call('DELETE', `/sandboxes/${fallback.body.id}`);

      // The record cannot be written: the claimed sandbox has no record, so the create destroys it.
      await poolFilled(t);
      repo.insert = async () => {
        throw new Error('insert failed (test)');
      };
      const before = new Set((await core.runtime.list()).map((s) => s.id));
      const failed = await t.call('POST', '/sandboxes', { timeoutSeconds: 60 });
      repo.insert = insert;
      expect(failed.status).toBe(500);
      const after = new Set((await core.runtime.list()).map((s) => s.id));
      const gone = [...before].filter((id) => !after.has(id));
      expect(gone).toHaveLength(1);
      expect(await core.repo.byRuntimeId(gone[0]!)).toBeUndefined();
    } finally {
      repo.insert = insert;
      repo.update = update;
    }
  }, 300_000);

  it('deleting a derived template right after its sandbox goes: no refill starts on it afterwards (no 409)', async () => {
    const src = await t.call('POST', '/sandboxes', { timeoutSeconds: 120 });
    const snap = await t.call('POST', `/sandboxes/${src.body.id}/template-snapshot`, { key: 'pool-race', hash: 'h1' });
    expect(snap.status, JSON.stringify(snap.body)).toBe(200);
    await t.call('DELETE', `/sandboxes/${src.body.id}`);
    // A create from it misses and schedules a refill a moment later; the delete comes first.
    const c = await t.call('POST', '/sandboxes', { templateKey: 'pool-race', templateHash: 'h1', timeoutSeconds: 60 });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    await t.call('DELETE', `/sandboxes/${c.body.id}`);
    const del = await t.call('DELETE', `/template-snapshots/${snap.body.id}`);
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    await new Promise((r) => setTimeout(r, 1000));
    const keys = (await t.nube.services.sandboxes.core.pool.status()).keys.map((k) => k.key);
    expect(keys.filter((k) => k.startsWith('snapshot:'))).toEqual([]);
  }, 120_000);

  it('a restart leaves no pooled sandbox: a crash is cleaned by the next start, a clean stop destroys them', async () => {
    await poolFilled(t);
    const core = t.nube.services.sandboxes.core;
    const pooled: string[] = [];
    for (const s of await core.runtime.list()) if (!(await core.repo.byRuntimeId(s.id))) pooled.push(s.id);
    expect(pooled.length).toBeGreaterThanOrEqual(1);
    // A crash: the process ends without closing its pool (its sandboxes keep running on the host).
    (core.pool as unknown as { keys: Map<string, unknown> }).keys.clear();
    const restart = { ...env, NUBE_OWNER_KEY: t.ownerKey };
    await t.close();
    t = await startSandboxNube('pool', restart, t.dataDir);
    const after = await t.nube.services.sandboxes.core.runtime.list();
    expect(after.map((s) => s.id).filter((id) => pooled.includes(id))).toEqual([]);

    // A clean stop: the pool's sandboxes go with it.
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 60 });
    expect(c.status).toBe(200);
    await t.call('DELETE', `/sandboxes/${c.body.id}`);
    await poolFilled(t);
    const core2 = t.nube.services.sandboxes.core;
    const pooled2: string[] = [];
    for (const s of await core2.runtime.list()) if (!(await core2.repo.byRuntimeId(s.id))) pooled2.push(s.id);
    expect(pooled2.length).toBeGreaterThanOrEqual(1);
    const dir = t.dataDir;
    await t.close();
    // Gone before any restart: no state, no mount, no netns left on the host.
    const runtimeDir = `${dir}/${driver === 'gvisor' ? 'sandbox-runtime-gvisor' : 'sandbox-runtime'}`;
    for (const id of pooled2) {
      expect(existsSync(`${runtimeDir}/sandboxes/${id}`)).toBe(false);
      expect(existsSync(`/run/netns/nb-${id}`)).toBe(false);
    }
    t = await startSandboxNube('pool', restart, dir);
  }, 300_000);
});
