// Issue 28 item 1 through the API: one owner's sandbox that fills its disk stops at its own limit
// (diskMB) while another owner's sandbox writes 10 MB and runs commands; the host loses no more than
// that limit. diskMB defaults to the plan's, may not pass it, and a machine's disk is its tier's plus
// its add-ons. On SQLite and PostgreSQL (the disk_mb column).
import { statfs } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PLANS } from '../../src/platform/plans.js';
import { storeCheck } from '../../src/areas/sandboxes/store-doctor.js';
import { DIALECTS } from '../helpers/pg.js';
import { type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube } from './helpers.js';

const MB = 1024 * 1024;

async function hostFree(dir: string): Promise<number> {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
}

describe.each(DIALECTS)('%s: sandbox disk limits through the API', (dialect) => {
  let t: SandboxNube;
  let other: Record<string, string>;

  beforeAll(async () => {
    t = await startSandboxNube(
      `disk-${dialect}`,
      { NUBE_CHECKOUT_OPERATOR_KEY: 'operator-key-for-tests-0123456789', NUBE_METRICS_PUBLIC: 'true' },
      undefined,
      { dialect },
    );
    const acct = await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' });
    other = { authorization: `Bearer ${acct.secret}` };
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    for (const s of (await t.call('GET', '/sandboxes', undefined, other)).body?.sandboxes ?? []) {
      await t.call('DELETE', `/sandboxes/${s.id}`, undefined, other);
    }
    await stopSandboxNube(t);
  }, 120_000);

  it("a filler stops at its diskMB while another owner's sandbox writes 10 MB and execs", async () => {
    const filler = await t.call('POST', '/sandboxes', { diskMB: 64 });
    expect(filler.status).toBe(200);
    expect(filler.body.diskMB).toBe(64);
    const neighbour = await t.call('POST', '/sandboxes', {}, other);
    expect(neighbour.status).toBe(200);
    // The plan's default: Byte's.
    expect(neighbour.body.diskMB).toBe(PLANS.byte.sandboxDiskMb);
    const before = await hostFree(t.dataDir);
    const fill = await t.call('POST', `/sandboxes/${filler.body.id}/exec`, {
      command: 'dd if=/dev/zero of=/root/fill bs=1M count=1000 2>&1; echo "rc=$?"; sync; du -sm /root/fill',
      timeoutSeconds: 120,
    });
    expect(fill.status).toBe(200);
    expect(fill.body.stdout).toMatch(/No space left on device|Disk quota exceeded/);
    expect(fill.body.stdout).toContain('rc=1');
    const wrote = Number(fill.body.stdout.trim().split('\n').at(-1).split(/\s+/)[0]);
    expect(wrote).toBeGreaterThan(40);
    expect(wrote).toBeLessThanOrEqual(64);
    const n = await t.call(
      'POST',
      `/sandboxes/${neighbour.body.id}/exec`,
      { command: 'head -c 10485760 /dev/urandom > /root/ten && sync && stat -c %s /root/ten && echo ran' },
      other,
    );
    expect(n.status).toBe(200);
    expect(n.body.exitCode, n.body.stderr).toBe(0);
    expect(n.body.stdout).toBe('10485760\nran\n');
    const after = await hostFree(t.dataDir);
    // What the two wrote (64 + 10 MB) and filesystem metadata; never the host's whole free space.
    expect(before - after).toBeLessThan(120 * MB);
    // The filler still runs; its limit is in its runtime view.
    const rt = await t.call('POST', `/sandboxes/${filler.body.id}/runtime`);
    expect(rt.body.limits.diskMB).toBe(64);
  }, 300_000);

  it("diskMB past the plan is 402, a bad one 400; a fork keeps its parent's", async () => {
    const big = await t.call('POST', '/sandboxes', { diskMB: PLANS.byte.sandboxDiskMb + 1 }, other);
    expect(big.status).toBe(402);
    expect(big.body.code).toBe('DiskTooLarge');
    for (const diskMB of [0, 10, 'a lot', 1.5]) {
      const bad = await t.call('POST', '/sandboxes', { diskMB });
      expect(bad.status, String(diskMB)).toBe(400);
      expect(bad.body.issues[0].path).toContain('diskMB');
    }
    const parent = await t.call('POST', '/sandboxes', { diskMB: 96 });
    const fork = await t.call('POST', `/sandboxes/${parent.body.id}/fork`, { count: 1 });
    expect(fork.status).toBe(200);
    const kid = (fork.body.sandboxes ?? fork.body.items ?? fork.body)[0];
    expect((await t.call('GET', `/sandboxes/${kid.id}`)).body.diskMB).toBe(96);
    const w = await t.call('POST', `/sandboxes/${kid.id}/exec`, {
      command: 'head -c 120000000 /dev/zero > /root/x; echo "rc=$?"',
    });
    expect(w.body.stdout).toContain('rc=1');
  }, 300_000);

  it("a machine's disk is its tier's plus its add-ons", async () => {
    const m = await t.call('POST', '/machines', { tier: 'nano', diskAddonsGB: 100 });
    expect(m.status, JSON.stringify(m.body)).toBe(200);
    const s = await t.call('GET', `/sandboxes/${m.body.sandboxId}`);
    expect(s.body.diskMB).toBe((5 + 100) * 1024);
    expect((await t.call('DELETE', `/machines/${m.body.id}`)).status).toBe(200);
  }, 300_000);

  it('doctor and /metrics show the store against the host and warn before the reserve', async () => {
    // The store is opened (made, mounted) by the first sandbox.
    expect((await t.call('POST', '/sandboxes', {})).status).toBe(200);
    const res = await fetch(new URL('/metrics', t.baseUrl));
    expect(res.status).toBe(200);
    const text = await res.text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(metric('nube_sandbox_store_disk_limits')).toBe(1);
    expect(metric('nube_sandbox_store_size_bytes')).toBeGreaterThan(1024 * MB);
    expect(metric('nube_sandbox_store_allocated_bytes')).toBeGreaterThan(0);
    expect(metric('nube_sandbox_store_reserve_bytes')).toBe(10 * 1024 * MB);
    const free = metric('nube_host_free_bytes');
    expect(Math.abs(free - (await hostFree(t.dataDir)))).toBeLessThan(200 * MB);
    expect(metric('nube_sandbox_store_headroom_bytes')).toBe(free - 10 * 1024 * MB);
    // Sized within the reserve when made; other writers on the host may have taken some since.
    expect(metric('nube_sandbox_store_overcommit_bytes')).toBeLessThan(metric('nube_sandbox_store_size_bytes') / 2);
    expect(metric('nube_sandbox_store_near_reserve')).toBe(free < 15 * 1024 * MB ? 1 : 0);

    const config = t.nube.deps.config;
    const found = [await storeCheck(config)].flat();
    expect(found.map((r) => r.status)).toEqual([free < 15 * 1024 * MB ? 'warn' : 'ok', 'ok']);
    expect(found[0]!.found).toMatch(/^(xfs|btrfs) image .*GB sparse, .* taken, mounted at /);
    expect(found[1]!.found).toMatch(/disk limits: (XFS project quotas|btrfs qgroups)/);
    // Free space within half a reserve of the reserve: a warning before the host gets there.
    const near = { ...config, sandboxes: { ...config.sandboxes, storeReserveBytes: Math.round(free * 0.9) } };
    const w = [await storeCheck(near)].flat()[0]!;
    expect(w.status).toBe('warn');
    expect(w.found).toContain('the host nears its reserve');
    expect(w.found).toContain('past the reserve');
    const inside = { ...config, sandboxes: { ...config.sandboxes, storeReserveBytes: free + 1024 * MB } };
    expect([await storeCheck(inside)].flat()[0]!.found).toContain('the host is inside its reserve');
  });
});
