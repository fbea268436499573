// Per-sandbox disk limits on the store (store-quota.ts, issue 28 item 1): a sandbox that fills its
// disk is stopped at its own limit while another keeps writing, the host's free space drops by no
// more than that limit, and the limit outlives a suspend/resume and is inherited by a fork's child.
import { statfs } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanup, DRIVERS, testRuntime, uniqueId } from './test-env.js';

const MB = 1024 * 1024;

async function hostFree(dir: string): Promise<number> {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
}

/** Fills /root/fill in 1 MiB writes until a write fails; what dd said and how much it wrote. */
const FILL = 'dd if=/dev/zero of=/root/fill bs=1M count=400 2>&1; echo "rc=$?"; sync; du -sm /root/fill';

describe.each(DRIVERS)('%s runtime: disk limits', (driver) => {
  const { runtime, dataDir } = testRuntime('disk', {}, driver);

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(() => cleanup(runtime, dataDir), 120_000);

  it('a filler stops at its own limit; another sandbox writes 10 MB and runs; the host loses at most the limit', async () => {
    const filler = uniqueId('df');
    const other = uniqueId('do');
    const a = await runtime.create({ id: filler, limits: { diskMb: 64 } });
    const status = runtime.storeStatus!;
    // This host's kernel has no XFS quotas: the store is btrfs with qgroups; elsewhere XFS projects.
    expect(status.quota, status.quotaReason).not.toBeNull();
    expect(a.diskMb).toBe(64);
    await runtime.create({ id: other, limits: { diskMb: 256 } });
    const before = await hostFree(dataDir);
    const r = await runtime.exec(filler, FILL, { timeoutMs: 120_000 });
    const error = status.quota === 'xfs-project' ? 'No space left on device' : 'Disk quota exceeded';
    expect(r.stdout).toContain(error);
    expect(r.stdout).toContain('rc=1');
    const wrote = Number(r.stdout.trim().split('\n').at(-1)!.split(/\s+/)[0]);
    expect(wrote).toBeGreaterThan(40);
    expect(wrote).toBeLessThanOrEqual(64);
    // The full sandbox still answers (reads, execs); only its writes fail.
    expect((await runtime.exec(filler, 'echo alive')).stdout).toBe('alive\n');
    const o = await runtime.exec(
      other,
      'head -c 10485760 /dev/urandom > /root/ten && sync && du -sm /root/ten && echo ok',
    );
    expect(o.exitCode, o.stderr).toBe(0);
    expect(o.stdout).toContain('ok');
    // Sparse store: the host gives what was written, no more (64 + 10 MB, with metadata slack).
    const after = await hostFree(dataDir);
    expect(before - after).toBeLessThan(64 * MB + 10 * MB + 40 * MB);
    const usage = await runtime.usage(filler);
    expect(usage.diskTotalBytes).toBe(64 * MB);
    if (status.quota === 'xfs-project') {
      // XFS reports a project's limit to statfs on its dirs: df inside shows the sandbox's own disk.
      const df = await runtime.exec(filler, "df -m / | tail -1 | awk '{print $2}'");
      expect(Number(df.stdout.trim())).toBe(64);
    }
  }, 240_000);

  it('the limit survives suspend and resume and is inherited by a fork; freeing space lets writes go on', async () => {
    const id = uniqueId('dr');
    await runtime.create({ id, limits: { diskMb: 48 } });
    await runtime.exec(id, 'head -c 30000000 /dev/zero > /root/a && sync');
    await runtime.suspend(id);
    const resumed = await runtime.resume(id);
    expect(resumed.diskMb).toBe(48);
    const r = await runtime.exec(id, 'head -c 30000000 /dev/zero > /root/b; echo "rc=$?"');
    expect(r.stdout).toContain('rc=1');
    // The child starts with the parent's files as a lower layer and a disk of its own, as limited.
    await runtime.exec(id, 'rm -f /root/b && sync');
    const [kid] = await runtime.fork(id, [`${id}-k`]);
    expect(kid!.diskMb).toBe(48);
    const k = await runtime.exec(kid!.id, 'head -c 60000000 /dev/zero > /root/c; echo "rc=$?"');
    expect(k.stdout).toContain('rc=1');
    await runtime.exec(kid!.id, 'rm -f /root/c && sync');
    // A deletion gives the space back (btrfs frees it at its next commit).
    await runtime.exec(kid!.id, 'sync; sleep 1; sync');
    expect(
      (await runtime.exec(kid!.id, 'head -c 20000000 /dev/zero > /root/d; echo "rc=$?"')).stdout,
    ).toContain('rc=0');
  }, 240_000);

  it('a claim changes the limit of a running sandbox; without a limit the disk is the store', async () => {
    const id = uniqueId('dc');
    const s = await runtime.create({ id });
    expect(s.diskMb).toBeNull();
    const claimed = await runtime.claim(id, { limits: { diskMb: 32 } });
    expect(claimed.diskMb).toBe(32);
    const r = await runtime.exec(id, 'head -c 60000000 /dev/zero > /root/x; echo "rc=$?"');
    expect(r.stdout).toContain('rc=1');
  }, 120_000);
});
