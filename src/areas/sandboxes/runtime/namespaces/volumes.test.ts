// Volumes on the store across restarts of nube (issue 33): a second runtime object on the same data
// dir plays the restarted nube. The volume's files are where they were; a sandbox whose processes died
// meanwhile is started again with its volume bound; one that kept running keeps it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanup, DRIVERS, newRuntime, testRuntime, uniqueId } from './test-env.js';

describe.each(DRIVERS)('%s runtime: volumes', (driver) => {
  const { runtime, dataDir, opts } = testRuntime('volumes', {}, driver);

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(async () => {
    for (const v of ['v1', 'v1-copy']) await runtime.volumes.remove(v).catch(() => {});
    await cleanup(runtime, dataDir);
  }, 60_000);

  it('a volume and the sandboxes that mount it outlive a restart of nube', async () => {
    await runtime.volumes.create('v1', 256 * 1024 * 1024);
    const source = await runtime.volumes.path('v1');
    const kept = uniqueId('vk');
    const killed = uniqueId('vd');
    await runtime.create({ id: kept, mounts: [{ source, target: '/data', readOnly: false }] });
    await runtime.create({ id: killed, mounts: [{ source, target: '/mnt/ro', readOnly: true }] });
    await runtime.exec(kept, 'echo before > /data/f && sync');
    expect((await runtime.exec(killed, 'cat /mnt/ro/f')).stdout).toBe('before\n');
    process.kill(await runtime.initPid(killed), 'SIGKILL'); // dies while nube is "down"
    const again = newRuntime(driver, opts);
    await again.recover();
    expect(await again.volumes.usedBytes('v1')).toBeGreaterThan(0);
    await again.exec(kept, 'echo after >> /data/f && sync');
    expect((await again.exec(killed, 'cat /mnt/ro/f; touch /mnt/ro/x 2>/dev/null || echo ro')).stdout).toBe(
      'before\nafter\nro\n',
    );
    // The limit is the store's: past 256 MiB a write fails.
    const fill = await again.exec(
      kept,
      'head -c 300000000 /dev/zero > /data/big; echo "rc=$?"; rm -f /data/big',
    );
    expect(fill.stdout).toContain('rc=1');
    // A copy shares the files and goes its own way.
    await again.volumes.create('v1-copy', 256 * 1024 * 1024, { volume: 'v1' });
    await again.exec(kept, 'echo changed > /data/f && sync');
    const copy = uniqueId('vc');
    await again.create({
      id: copy,
      mounts: [{ source: await again.volumes.path('v1-copy'), target: '/c', readOnly: false }],
    });
    expect((await again.exec(copy, 'cat /c/f')).stdout).toBe('before\nafter\n');
    for (const id of [kept, killed, copy]) await again.destroy(id);
  }, 300_000);
});
