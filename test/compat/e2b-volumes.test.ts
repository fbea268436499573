// Issue 33 item 2: E2B's Volume API through the real `e2b` SDK, over nube's volumes. A file written
// through one sandbox is read by the next; the volume is nube's (same store, same owner); deleting a
// mounted volume is refused until its sandbox is gone; bad names and mounts are E2B's 400s; another
// account's volume is not found; the volume content API (the Volume's file methods) reads and writes
// the volume's files without ever following a symlink a sandbox put there, and a full volume is 507.
import {
  AuthenticationError,
  Sandbox,
  SandboxError,
  Volume,
  VolumeError,
  VolumeNotFoundError,
  VolumePathNotFoundError,
} from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;

/** The status an SDK error carries in its message (`400: ...`). */
const status = async (p: Promise<unknown>) => {
  const e = (await p.then(
    () => null,
    (x: unknown) => x,
  )) as Error | null;
  expect(e, 'expected a rejection').not.toBeNull();
  return { error: e!, code: Number(/^(\d{3}):/.exec(e!.message)?.[1]) };
};

describe('e2b SDK: volumes', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-volumes', ['base'], { NUBE_SANDBOX_CREATE_PER_MINUTE: '1000' });
    process.env.E2B_VOLUME_API_URL = `${t.baseUrl}/e2b`;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (!t) return;
    for (const s of (await t.call('GET', '/sandboxes')).body?.sandboxes ?? [])
      await t.call('DELETE', `/sandboxes/${s.id}`);
    for (const v of (await t.call('GET', '/volumes')).body?.items ?? [])
      await t.call('DELETE', `/volumes/${v.id}`);
    delete process.env.E2B_VOLUME_API_URL;
    await stopSandboxNube(t);
  }, 120_000);

  it('a file written through one sandbox is read by the next; delete waits for the sandbox to go', async () => {
    const vol = await Volume.create('work');
    expect(vol.volumeId).toMatch(/^vol_/);
    expect(vol.name).toBe('work');
    expect(vol.token.length).toBeGreaterThan(20);
    // It is a nube volume: the plan's sandbox disk is its limit (the test owner's Tera: 50 GiB).
    const own = await t.call('GET', `/volumes/${vol.volumeId}`);
    expect(own.body).toMatchObject({ name: 'work', sizeGB: 50, usedBytes: 0 });
    expect(await Volume.list()).toEqual([{ volumeId: vol.volumeId, name: 'work' }]);
    expect(await Volume.getInfo(vol.volumeId)).toEqual({
      volumeId: vol.volumeId,
      name: 'work',
      token: vol.token,
      domain: undefined,
    });
    expect((await Volume.connect(vol.volumeId)).name).toBe('work');

    const a = await Sandbox.create('base', { volumeMounts: { '/data': vol }, timeoutMs: 120_000 });
    await a.files.write('/data/notes/hello.txt', 'written by the first sandbox\n');
    expect(
      (await a.commands.run('echo more >> /data/notes/hello.txt && df -k /data | tail -1')).exitCode,
    ).toBe(0);
    expect((await a.getInfo()).volumeMounts).toEqual([{ name: 'work', path: '/data' }]);
    const listed = await Sandbox.list().nextItems();
    expect(listed.find((s) => s.sandboxId === a.sandboxId)?.volumeMounts).toEqual([
      { name: 'work', path: '/data' },
    ]);
    // nube's own API shows the same mount.
    expect((await t.call('GET', `/volumes/${vol.volumeId}`)).body.mounts).toEqual([
      { sandboxId: a.sandboxId.replace('-', '_'), path: '/data', readOnly: false },
    ]);

    // Mounted: deleting is refused (nube's 409 VolumeInUse), and a second writer too (409 VolumeBusy).
    const del = await status(Volume.destroy(vol.volumeId));
    expect(del.error).toBeInstanceOf(VolumeError);
    expect(del.code).toBe(409);
    const busy = await status(Sandbox.create('base', { volumeMounts: { '/data': 'work' } }));
    expect(busy.error).toBeInstanceOf(SandboxError);
    expect(busy.code).toBe(409);

    expect(await a.kill()).toBe(true);
    const b = await Sandbox.create('base', {
      volumeMounts: { '/home/user/work': 'work' },
      timeoutMs: 120_000,
    });
    expect(await b.files.read('/home/user/work/notes/hello.txt')).toBe(
      'written by the first sandbox\nmore\n',
    );
    expect((await b.commands.run('cat /home/user/work/notes/hello.txt')).stdout).toBe(
      'written by the first sandbox\nmore\n',
    );
    expect((await Sandbox.getInfo(b.sandboxId)).volumeMounts).toEqual([
      { name: 'work', path: '/home/user/work' },
    ]);
    // Paused and resumed through connect, it has its volume back, and the volume stays held meanwhile.
    expect(await b.pause()).toBe(true);
    expect((await status(Volume.destroy(vol.volumeId))).code).toBe(409);
    const back = await Sandbox.connect(b.sandboxId);
    await back.files.write('/home/user/work/after-resume.txt', 'yes');
    expect((await back.commands.run('ls /home/user/work')).stdout).toBe('after-resume.txt\nnotes\n');
    await back.kill();

    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    await expect(Volume.getInfo(vol.volumeId)).rejects.toBeInstanceOf(VolumeNotFoundError);
    expect(await Volume.destroy(vol.volumeId)).toBe(false);
    expect(await Volume.list()).toEqual([]);
  }, 300_000);

  it('bad names and mounts are 400s; a sandbox without volumes shows none', async () => {
    for (const name of ['has space', 'dot.ted', 'x'.repeat(129), '']) {
      const r = await status(Volume.create(name));
      expect(r.error, name).toBeInstanceOf(VolumeError);
      expect(r.code, name).toBe(400);
    }
    const vol = await Volume.create('data_1');
    const dup = await status(Volume.create('data_1'));
    expect(dup.code).toBe(400);
    expect(dup.error.message).toContain("Volume with name 'data_1' already exists");

    const bad: [Record<string, string>, RegExp][] = [
      [{ '/data': 'nope' }, /volume 'nope' not found/],
      [{ data: 'data_1' }, /absolute path/],
      [{ '/proc/x': 'data_1' }, /\/proc/],
      [{ '/a/../b': 'data_1' }, /no \. or \.\./],
      [{ '/a': 'data_1', '/a/b': 'data_1' }, /overlaps the mount at \/a|mounted once/],
    ];
    for (const [mounts, why] of bad) {
      const r = await status(Sandbox.create('base', { volumeMounts: mounts }));
      expect(r.code, JSON.stringify(mounts)).toBe(400);
      expect(r.error.message, JSON.stringify(mounts)).toMatch(why);
    }
    // None of the refused creates left a sandbox or a mount behind.
    expect((await t.call('GET', `/volumes/${vol.volumeId}`)).body.mounts).toEqual([]);
    const plain = await Sandbox.create('base');
    expect((await plain.getInfo()).volumeMounts).toEqual([]);
    await plain.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  }, 120_000);

  it("another account's volume is not found", async () => {
    const vol = await Volume.create('mine');
    const acct = await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' });
    const apiKey = acct.secret;
    await expect(Volume.getInfo(vol.volumeId, { apiKey })).rejects.toBeInstanceOf(VolumeNotFoundError);
    await expect(Volume.connect(vol.volumeId, { apiKey })).rejects.toBeInstanceOf(VolumeNotFoundError);
    expect(await Volume.destroy(vol.volumeId, { apiKey })).toBe(false);
    expect(await Volume.list({ apiKey })).toEqual([]);
    const mount = await status(Sandbox.create('base', { apiKey, volumeMounts: { '/data': 'mine' } }));
    expect(mount.code).toBe(400);
    expect(mount.error.message).toContain("volume 'mine' not found");
    // The same name is free in another account.
    const theirs = await Volume.create('mine', { apiKey });
    expect(theirs.volumeId).not.toBe(vol.volumeId);
    // Byte's sandbox disk, 2 GiB, is its limit.
    const seen = await t.call('GET', `/volumes/${theirs.volumeId}`, undefined, {
      authorization: `Bearer ${apiKey}`,
    });
    expect(seen.body).toMatchObject({ name: 'mine', sizeGB: 2 });
    expect(await Volume.destroy(theirs.volumeId, { apiKey })).toBe(true);
    expect((await Volume.getInfo(vol.volumeId)).name).toBe('mine');
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  });

  it("the volume content API reads and writes the volume's files, never following a symlink out of it", async () => {
    const vol = await Volume.create('content');
    const hello = await vol.writeFile('/a.txt', 'hello');
    expect(hello).toMatchObject({
      name: 'a.txt',
      path: '/a.txt',
      type: 'file',
      size: 5,
      uid: 1000,
      gid: 1000,
      mode: 0o644,
    });
    expect(hello.mtime).toBeInstanceOf(Date);
    expect(await vol.makeDir('/d/e', { force: true })).toMatchObject({
      path: '/d/e',
      type: 'directory',
      uid: 1000,
    });
    await expect(vol.makeDir('/x/y')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    expect((await status(vol.makeDir('/d'))).code).toBe(409);
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    await vol.writeFile('/d/e/b.bin', bytes.buffer, { uid: 0, gid: 0, mode: 0o600 });
    expect(await vol.readFile('/d/e/b.bin', { format: 'bytes' })).toEqual(bytes);
    expect(await vol.readFile('/a.txt')).toBe('hello');
    expect((await vol.list('/')).map((e) => [e.path, e.type])).toEqual([
      ['/a.txt', 'file'],
      ['/d', 'directory'],
    ]);
    expect((await vol.list('/', { depth: 3 })).map((e) => e.path)).toEqual([
      '/a.txt',
      '/d',
      '/d/e',
      '/d/e/b.bin',
    ]);
    expect(await vol.getInfo('/d/e/b.bin')).toMatchObject({ size: 5, uid: 0, gid: 0, mode: 0o600 });
    expect(await vol.exists('/nope')).toBe(false);
    expect(await vol.exists('/d/e')).toBe(true);
    expect(await vol.updateMetadata('/a.txt', { mode: 0o640, uid: 1001 })).toMatchObject({
      mode: 0o640,
      uid: 1001,
      gid: 1000,
    });
    // Writing replaces a file unless force is false.
    await vol.writeFile('/a.txt', 'hello again');
    expect((await status(vol.writeFile('/a.txt', 'no', { force: false }))).code).toBe(409);
    expect(await vol.readFile('/a.txt')).toBe('hello again');
    for (const bad of ['a.txt', '/d/../a.txt', '/./a.txt']) {
      const r = await status(vol.readFile(bad));
      expect(r.error, bad).toBeInstanceOf(VolumeError);
      expect(r.code, bad).toBe(400);
    }

    // A sandbox mounting it sees the same files, and what it writes is read back while it runs.
    const s = await Sandbox.create('base', { volumeMounts: { '/data': vol }, timeoutMs: 120_000 });
    const seen = await s.commands.run(
      'cat /data/a.txt; echo; stat -c %u:%g /data/a.txt; echo from-sbx > /data/c.txt; ln -s /etc /data/link; ln -s /etc/hostname /data/esc',
      { user: 'root' },
    );
    expect(seen.stdout).toBe('hello again\n1001:1000\n');
    expect(await vol.readFile('/c.txt')).toBe('from-sbx\n');
    // Its symlinks are entries, never followed: not to the host's /etc, not to the sandbox's.
    expect(await vol.getInfo('/esc')).toMatchObject({ type: 'symlink', target: '/etc/hostname' });
    for (const op of [
      () => vol.readFile('/esc'),
      () => vol.readFile('/link/hostname'),
      () => vol.list('/link'),
      () => vol.writeFile('/link/x', 'x'),
      () => vol.writeFile('/esc', 'x'),
    ]) {
      expect((await status(op())).code).toBe(400);
    }
    await vol.remove('/link');
    await vol.remove('/d');
    expect((await vol.list('/')).map((e) => e.path)).toEqual(['/a.txt', '/c.txt', '/esc']);
    await expect(vol.remove('/d')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    expect((await status(vol.remove('/'))).code).toBe(400);
    expect((await s.commands.run('ls /data; ls /etc/hostname')).stdout).toBe(
      'a.txt\nc.txt\nesc\n/etc/hostname\n',
    );
    await s.kill();

    // A token opens its own volume only; a forged one nothing.
    const forged = new Volume(vol.volumeId, vol.name, `${vol.token.slice(0, -4)}0000`);
    await expect(forged.readFile('/a.txt')).rejects.toBeInstanceOf(AuthenticationError);
    const other = await Volume.create('content-2');
    await expect(new Volume(other.volumeId, other.name, vol.token).readFile('/a.txt')).rejects.toBeInstanceOf(
      AuthenticationError,
    );
    expect(await Volume.destroy(other.volumeId)).toBe(true);
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    // The volume is gone: its token finds nothing.
    await expect(vol.readFile('/a.txt')).rejects.toBeInstanceOf(VolumePathNotFoundError);
  }, 180_000);
  it("a write past the volume's limit is 507", async () => {
    for (const v of await Volume.list()) if (v.name === 'full') await Volume.destroy(v.volumeId);
    const vol = await Volume.create('full');
    // Its limit brought down to 1 GiB through nube's API, then filled from a sandbox.
    expect((await t.call('PATCH', `/volumes/${vol.volumeId}`, { sizeGB: 1 })).status).toBe(200);
    const s = await Sandbox.create('base', { volumeMounts: { '/data': vol }, timeoutMs: 120_000 });
    const fill = await s.commands.run(
      'dd if=/dev/zero of=/data/fill bs=1M count=1200 2>&1; sync; echo done',
      {
        user: 'root',
        timeoutMs: 120_000,
      },
    );
    expect(fill.stdout).toMatch(/Disk quota exceeded|No space left on device/);
    const r = await status(vol.writeFile('/more.bin', new Uint8Array(4 * 1024 * 1024).buffer));
    expect(r.error).toBeInstanceOf(VolumeError);
    expect(r.code).toBe(507);
    expect(r.error.message).toContain('the volume is full');
    // Room again once the filler goes.
    await vol.remove('/fill');
    expect((await vol.writeFile('/more.bin', new Uint8Array(4 * 1024 * 1024).buffer)).size).toBe(
      4 * 1024 * 1024,
    );
    await s.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  }, 180_000);
});
