// The real `e2b` SDK against nube: files.
import { FileType, NotFoundError, Sandbox } from 'e2b';
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
    expect(st).toMatchObject({ name: 'f.txt', type: FileType.FILE, path: '/tmp/tree/f.txt', size: 5, owner: 'root' });
    expect(st.permissions).toMatch(/^-rw/);
    expect(st.modifiedTime).toBeInstanceOf(Date);
    const moved = await sbx.files.rename('/tmp/tree/f.txt', '/tmp/tree/sub/h.txt');
    expect(moved).toMatchObject({ name: 'h.txt', path: '/tmp/tree/sub/h.txt' });
    expect(await sbx.files.exists('/tmp/tree/f.txt')).toBe(false);
    await sbx.files.remove('/tmp/tree/sub');
    expect(await sbx.files.exists('/tmp/tree/sub')).toBe(false);
    await expect(sbx.files.list('/tmp/missing-dir')).rejects.toBeInstanceOf(NotFoundError);
  });
});
