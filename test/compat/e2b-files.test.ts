// The real `e2b` SDK against nube: files.
import { gzipSync } from 'node:zlib';
import { FileType, InvalidArgumentError, NotFoundError, Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;

describe('e2b SDK: files', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-files');
    sbx = await Sandbox.create();
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('writes and reads text and bytes, relative paths under the home', async () => {
    const info = await sbx.files.write('/tmp/e2b/hello.txt', 'hello world\n');
    expect(info).toMatchObject({ name: 'hello.txt', path: '/tmp/e2b/hello.txt' });
    expect(await sbx.files.read('/tmp/e2b/hello.txt')).toBe('hello world\n');
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    // A relative path is under E2B's home, /home/user, where commands start too.
    await sbx.files.write('data.bin', bytes.buffer);
    expect(Array.from(await sbx.files.read('/home/user/data.bin', { format: 'bytes' }))).toEqual([0, 1, 2, 250, 255]);
    expect((await sbx.commands.run('wc -c < data.bin')).stdout).toBe('5\n');
    expect(await sbx.files.read('~/data.bin', { format: 'bytes' })).toHaveLength(5);
    const many = await sbx.files.write([
      { path: '/tmp/many/a.txt', data: 'A' },
      { path: '/tmp/many/b.txt', data: 'B' },
    ]);
    expect(many.map((f) => f.path).sort()).toEqual(['/tmp/many/a.txt', '/tmp/many/b.txt']);
    expect((await sbx.commands.run('cat /tmp/many/a.txt /tmp/many/b.txt')).stdout).toBe('AB');
  });

  it('reading a missing file is a NotFoundError', async () => {
    await expect(sbx.files.read('/tmp/nope.txt')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('lists, checks existence, stats, makes dirs, renames and removes', async () => {
    expect(await sbx.files.makeDir('/tmp/tree/sub')).toBe(true);
    expect(await sbx.files.makeDir('/tmp/tree/sub')).toBe(false);
    await sbx.files.write('/tmp/tree/f.txt', '12345');
    await sbx.files.write('/tmp/tree/sub/g.txt', 'g');
    const top = await sbx.files.list('/tmp/tree');
    expect(top.map((e) => [e.name, e.type])).toEqual([
      ['f.txt', FileType.FILE],
      ['sub', FileType.DIR],
    ]);
    const deep = await sbx.files.list('/tmp/tree', { depth: 2 });
    expect(deep.map((e) => e.path)).toContain('/tmp/tree/sub/g.txt');
    expect(await sbx.files.exists('/tmp/tree/f.txt')).toBe(true);
    expect(await sbx.files.exists('/tmp/tree/none')).toBe(false);
    const st = await sbx.files.getInfo('/tmp/tree/f.txt');
    // Written for E2B's default user, as envd writes it.
    expect(st).toMatchObject({ name: 'f.txt', type: FileType.FILE, path: '/tmp/tree/f.txt', size: 5, owner: 'user', group: 'user' });
    expect(st.permissions).toMatch(/^-rw/);
    expect(st.modifiedTime).toBeInstanceOf(Date);
    // An empty directory has a size, in whole blocks, as on E2B's ext4 (btrfs would say 0).
    await sbx.files.makeDir('/tmp/tree/empty');
    const dir = await sbx.files.getInfo('/tmp/tree/empty');
    expect(dir).toMatchObject({ type: FileType.DIR, size: 4096 });
    await sbx.files.remove('/tmp/tree/empty');
    const moved = await sbx.files.rename('/tmp/tree/f.txt', '/tmp/tree/sub/h.txt');
    expect(moved).toMatchObject({ name: 'h.txt', path: '/tmp/tree/sub/h.txt' });
    expect(await sbx.files.exists('/tmp/tree/f.txt')).toBe(false);
    await sbx.files.remove('/tmp/tree/sub');
    expect(await sbx.files.exists('/tmp/tree/sub')).toBe(false);
    await expect(sbx.files.list('/tmp/missing-dir')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('removes a path that is not there as envd does (no error); a symlink has its absolute target', async () => {
    await sbx.files.remove('/tmp/never-was');
    await sbx.files.write('linked/target.txt', 't');
    await sbx.commands.run('cd linked && ln -s target.txt rel-link && ln -s /etc/hostname abs-link');
    expect(await sbx.files.getInfo('linked/rel-link')).toMatchObject({
      name: 'rel-link',
      symlinkTarget: '/home/user/linked/target.txt',
      type: FileType.FILE,
    });
    expect((await sbx.files.getInfo('linked/abs-link')).symlinkTarget).toBe('/etc/hostname');
    const listed = await sbx.files.list('linked');
    expect(listed.find((e) => e.name === 'rel-link')?.symlinkTarget).toBe('/home/user/linked/target.txt');
    expect(listed.find((e) => e.name === 'target.txt')?.symlinkTarget).toBeUndefined();
  });

  it('keeps file metadata as user.e2b.* extended attributes: set by uploads, read back everywhere', async () => {
    const info = await sbx.files.write('meta/a.txt', 'A', { metadata: { author: 'ana', purpose: 'test' } });
    expect(info.metadata).toEqual({ author: 'ana', purpose: 'test' });
    expect((await sbx.files.getInfo('meta/a.txt')).metadata).toEqual({ author: 'ana', purpose: 'test' });
    // Octet-stream uploads carry it too; every file of a many-file upload gets it.
    const octet = await sbx.files.write('meta/b.txt', 'B', { metadata: { k: 'v' }, useOctetStream: true });
    expect(octet.metadata).toEqual({ k: 'v' });
    const many = await sbx.files.write([{ path: 'meta/c.txt', data: 'C' }, { path: 'meta/d.txt', data: 'D' }], { metadata: { batch: '1' } });
    expect(many.map((f) => f.metadata)).toEqual([{ batch: '1' }, { batch: '1' }]);
    const listed = await sbx.files.list('meta');
    expect(Object.fromEntries(listed.map((e) => [e.name, e.metadata]))).toEqual({
      'a.txt': { author: 'ana', purpose: 'test' },
      'b.txt': { k: 'v' },
      'c.txt': { batch: '1' },
      'd.txt': { batch: '1' },
    });
    // It moves with the file; an upload without it clears it; set from inside, it shows too.
    expect((await sbx.files.rename('meta/a.txt', 'meta/e.txt')).metadata).toEqual({ author: 'ana', purpose: 'test' });
    expect((await sbx.files.write('meta/e.txt', 'E')).metadata).toBeUndefined();
    expect((await sbx.files.getInfo('meta/e.txt')).metadata).toBeUndefined();
    await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/meta/e.txt', 'user.e2b.from', b'inside')"`);
    expect((await sbx.files.getInfo('meta/e.txt')).metadata).toEqual({ from: 'inside' });
    expect((await sbx.commands.run('getfattr -n user.e2b.purpose --only-values meta/b.txt 2>&1 || true')).stdout).toMatch(/No such attribute/);
    // Bad metadata is refused and nothing is written.
    await expect(sbx.files.write('meta/bad.txt', 'x', { metadata: { good: 'bad\nvalue' } })).rejects.toBeInstanceOf(InvalidArgumentError);
    const raw = await fetch(`${t.baseUrl}/files?path=/tmp/bad.txt`, {
      method: 'POST',
      headers: { ...envd(sbx), 'content-type': 'application/octet-stream', 'x-metadata-key': 'caf\u00e9' },
      body: 'x',
    });
    expect(raw.status).toBe(400);
    expect(await sbx.files.exists('/tmp/bad.txt')).toBe(false);
  });

  it('takes gzip-encoded and octet-stream uploads and gives gzip downloads', async () => {
    const text = 'compressible '.repeat(5000);
    const up = await fetch(`${t.baseUrl}/files?path=gz/up.txt`, {
      method: 'POST',
      headers: { ...envd(sbx), 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
      body: gzipSync(text),
    });
    expect(up.status).toBe(200);
    expect(await up.json()).toEqual([{ name: 'up.txt', type: 'file', path: '/home/user/gz/up.txt' }]);
    expect(await sbx.files.read('gz/up.txt')).toBe(text);
    expect((await sbx.files.write('gz/sdk.txt', text, { gzip: true })).path).toBe('/home/user/gz/sdk.txt');
    expect(await sbx.files.read('gz/sdk.txt', { gzip: true })).toBe(text);
    const down = await fetch(`${t.baseUrl}/files?path=gz/up.txt`, { headers: { ...envd(sbx), 'accept-encoding': 'gzip' } });
    expect(down.headers.get('content-encoding')).toBe('gzip');
    expect(await down.text()).toBe(text);
    const bomb = await fetch(`${t.baseUrl}/files?path=gz/bad.txt`, {
      method: 'POST',
      headers: { ...envd(sbx), 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
      body: 'not gzip at all',
    });
    expect(bomb.status).toBe(400);
    expect(await sbx.files.read('gz/empty.txt').catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
    await sbx.files.write('gz/empty.txt', '');
    expect(await sbx.files.read('gz/empty.txt')).toBe('');
  });
});

/** The headers the SDK sends to envd for this sandbox. */
function envd(s: Sandbox): Record<string, string> {
  return { 'E2b-Sandbox-Id': s.sandboxId, 'X-Access-Token': (s as unknown as { envdAccessToken: string }).envdAccessToken };
}
