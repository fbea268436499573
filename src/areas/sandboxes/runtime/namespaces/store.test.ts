// The reflink store (store.ts): forks share the parent's blocks instead of copying them, stay
// isolated both ways, survive a restart and a remount of the image, and give space back when deleted.
import { existsSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { readFile, statfs, writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from './proc.js';
import { closeStore, openStore, storePaths } from './store.js';
import { cleanup, DRIVERS, newRuntime, TEST_ROOT, testRuntime, uniqueId } from './test-env.js';

const MB = 1024 * 1024;

/** Bytes in use on the filesystem holding `dir`. */
async function used(dir: string): Promise<number> {
  const s = await statfs(dir);
  return (s.blocks - s.bfree) * s.bsize;
}

describe.each(DRIVERS)('%s runtime: reflink store', (driver) => {
  const { runtime, dataDir, opts } = testRuntime('store', {}, driver);

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(() => cleanup(runtime, dataDir), 120_000);

  it('upper dirs and snapshots live on a loop-mounted XFS (or btrfs) image with reflinks', async () => {
    const id = uniqueId('st');
    await runtime.create({ id });
    const status = runtime.storeStatus!;
    // This host's data dirs are on ext4, which has no reflinks: the image is made. XFS when the kernel
    // has XFS quotas (per-sandbox disk limits), else btrfs with qgroups (this host's kernel).
    expect(status).toMatchObject({ kind: 'image', root: storePaths(dataDir).mount });
    expect(status.fsType).toBe(status.quota === 'btrfs-qgroup' ? 'btrfs' : 'xfs');
    expect(runtime.sandboxDir(id).startsWith(`${status.root}/sandboxes/`)).toBe(true);
    expect((await run('stat', ['-f', '-c', '%T', `${runtime.sandboxDir(id)}/disk/upper`])).stdout.trim()).toBe(status.fsType);
    // Sparse: it holds what was written, not its size.
    const img = statSync(storePaths(dataDir).image);
    expect(img.blocks * 512).toBeLessThan(img.size / 10);
    expect(img.mode & 0o777).toBe(0o600);
    await runtime.destroy(id);
  });

  it('a fork of a sandbox that wrote 100 MB shares its blocks; parent and child stay apart both ways', async () => {
    const id = uniqueId('sf');
    await runtime.create({ id });
    await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && echo parent > /root/who && sync');
    const root = runtime.storeStatus!.root;
    const before = await used(root);
    const [kid] = await runtime.fork(id, [`${id}-k`]);
    // A copy would take 100 MB more; reflinks take metadata.
    expect(await used(root)).toBeLessThan(before + 20 * MB);
    const sum = async (sid: string) => (await runtime.exec(sid, 'md5sum < /root/big')).stdout;
    const parentSum = await sum(id);
    expect(await sum(kid!.id)).toBe(parentSum);
    // Each side's writes after the fork, including into the shared file, stay its own.
    await runtime.exec(kid!.id, 'echo child > /root/who; printf XXXX | dd of=/root/big conv=notrunc status=none');
    await runtime.exec(id, 'echo later > /root/parent-only; printf YYYY | dd of=/root/big bs=1 seek=50000000 conv=notrunc status=none');
    expect((await runtime.exec(id, 'cat /root/who')).stdout).toBe('parent\n');
    expect((await runtime.exec(kid!.id, 'cat /root/who; head -c 4 /root/big')).stdout).toBe('child\nXXXX');
    expect((await runtime.exec(kid!.id, 'dd if=/root/big bs=1 skip=50000000 count=4 status=none')).stdout).not.toBe('YYYY');
    expect((await runtime.exec(kid!.id, 'test -e /root/parent-only; echo $?')).stdout).toBe('1\n');
    expect(await sum(id)).not.toBe(parentSum);
    expect((await runtime.exec(id, 'dd if=/root/big bs=1 skip=50000000 count=4 status=none')).stdout).toBe('YYYY');
    await runtime.destroy(kid!.id);
    await runtime.deleteSnapshot(kid!.layers[0]!);
    await runtime.destroy(id);
  }, 300_000);

  it('a restart keeps parent and fork, also when the image is mounted again (a reboot)', async () => {
    const id = uniqueId('sr');
    await runtime.create({ id });
    await runtime.exec(id, 'head -c 20000000 /dev/urandom > /root/data && echo parent > /root/who');
    const [kid] = await runtime.fork(id, [`${id}-k`]);
    await runtime.exec(kid!.id, 'echo child > /root/who');
    const sumBefore = (await runtime.exec(id, 'md5sum < /root/data')).stdout;
    // nube restarts: a new runtime re-adopts both.
    const again = newRuntime(driver, opts);
    expect((await again.recover()).map((s) => s.id)).toEqual(expect.arrayContaining([id, kid!.id]));
    expect((await again.exec(kid!.id, 'cat /root/who; md5sum < /root/data')).stdout).toBe(`child\n${sumBefore}`);
    // The host reboots: nothing runs and the image is not mounted; the next start mounts it again.
    await again.suspend(id);
    await again.suspend(kid!.id);
    await again.detachStore();
    expect((await readMounts()).includes(` ${storePaths(dataDir).mount} `)).toBe(false);
    const third = newRuntime(driver, opts);
    await third.recover();
    expect((await readMounts()).includes(` ${storePaths(dataDir).mount} `)).toBe(true);
    await third.resume(id);
    await third.resume(kid!.id);
    expect((await third.exec(id, 'cat /root/who; md5sum < /root/data')).stdout).toBe(`parent\n${sumBefore}`);
    expect((await third.exec(kid!.id, 'cat /root/who; md5sum < /root/data')).stdout).toBe(`child\n${sumBefore}`);
    await third.destroy(kid!.id);
    await third.deleteSnapshot(kid!.layers[0]!);
    await third.destroy(id);
    await Promise.all([again.close(), third.close()]);
  }, 300_000);

  it('a fork cut short by a stop of nube (its copy never finished) is removed at the next start', async () => {
    const id = uniqueId('sx');
    await runtime.create({ id });
    const [kid] = await runtime.fork(id, [`${id}-k`]);
    const snapDir = `${runtime.storeStatus!.root}/snapshots/${kid!.layers[0]}`;
    // As nube leaves it when it stops mid-fork: the child's record saved, not started; the copy without its meta.
    rmSync(`${snapDir}/meta.json`);
    const statePath = `${runtime.sandboxDir(kid!.id)}/state.json`;
    const rec = JSON.parse(await readFile(statePath, 'utf8'));
    await writeFile(statePath, JSON.stringify({ ...rec, init: null }));
    const again = newRuntime(driver, opts);
    const found = (await again.recover()).map((s) => s.id);
    expect(found).toContain(id);
    expect(found).not.toContain(kid!.id);
    expect(existsSync(runtime.sandboxDir(kid!.id))).toBe(false);
    expect(existsSync(snapDir)).toBe(false);
    expect((await again.exec(id, 'echo ok')).stdout).toBe('ok\n');
    await again.destroy(id);
    await again.close();
  }, 300_000);

  it('deleting sandboxes and snapshots gives the space back to the host', async () => {
    const id = uniqueId('sd');
    await runtime.create({ id });
    await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
    const [kid] = await runtime.fork(id, [`${id}-k`]);
    await runtime.trimmed();
    const image = storePaths(dataDir).image;
    const allocated = () => statSync(image).blocks * 512;
    const full = allocated();
    await runtime.destroy(kid!.id);
    await runtime.deleteSnapshot(kid!.layers[0]!);
    await runtime.destroy(id);
    await runtime.trimmed();
    expect(full - allocated()).toBeGreaterThan(90 * MB);
  }, 300_000);
});

describe('reflink store: when it is not used', () => {
  const dirs: string[] = [];
  const dir = (name: string) => {
    const d = `${TEST_ROOT}/store-${name}-${process.pid}`;
    dirs.push(d);
    mkdirSync(d, { recursive: true });
    return d;
  };
  afterAll(async () => {
    for (const d of dirs) {
      await closeStore(d);
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('NUBE_SANDBOX_STORE=copy keeps the data dir as it is', async () => {
    const d = dir('copy');
    expect(await openStore(d, { mode: 'copy' })).toMatchObject({ kind: 'copy', root: d, reason: 'NUBE_SANDBOX_STORE=copy' });
  });

  it('a data dir that already holds sandboxes outside a store keeps them and copies', async () => {
    const d = dir('legacy');
    mkdirSync(`${d}/sandboxes/old-one`, { recursive: true });
    const s = await openStore(d);
    expect(s.kind).toBe('copy');
    expect(s.reason).toContain('made before the store');
  });

  it('an existing image is used whatever the data dir holds, and opening twice is idempotent', async () => {
    const d = dir('twice');
    const a = await openStore(d, { sizeBytes: 4 * 1024 * MB });
    expect(a).toMatchObject({ kind: 'image', image: { sizeBytes: 4 * 1024 * MB } });
    await closeStore(d);
    mkdirSync(`${d}/sandboxes/stray`, { recursive: true });
    const b = await openStore(d);
    expect(b.kind).toBe('image');
    expect((await readMounts()).split(` ${storePaths(d).mount} `).length).toBe(2);
  });
});

function readMounts(): Promise<string> {
  return readFile('/proc/self/mountinfo', 'utf8');
}
