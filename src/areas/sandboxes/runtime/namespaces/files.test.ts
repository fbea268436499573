import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { oldRunsc, runscBuild } from '../gvisor/runsc.js';
import { cleanup, DRIVERS, testRuntime, uniqueId } from './test-env.js';

const OLD_RUNSC = DRIVERS.includes('gvisor') && oldRunsc(runscBuild(spawnSync('runsc', ['--version']).stdout?.toString() ?? ''));

describe.each(DRIVERS)('%s runtime: files', (driver) => {
  const { runtime, dataDir } = testRuntime('files', {}, driver);
  const id = uniqueId('fs');

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
    await runtime.create({ id });
  }, 900_000);
  afterAll(() => cleanup(runtime, dataDir), 60_000);

  it('writes, reads, lists, moves, deletes and makes directories', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 10, 13]);
    await runtime.writeFile(id, '/work/deep/bin.dat', bytes);
    expect(Buffer.compare(await runtime.readFile(id, '/work/deep/bin.dat'), bytes)).toBe(0);
    await runtime.writeFile(id, 'rel.txt', Buffer.from('hello'));
    expect((await runtime.readFile(id, '/root/rel.txt')).toString()).toBe('hello');
    await runtime.mkdir(id, '/work/empty/nested');
    const list = await runtime.listDir(id, '/work');
    expect(list.map((e) => [e.name, e.type])).toEqual([
      ['deep', 'dir'],
      ['empty', 'dir'],
    ]);
    const [entry] = await runtime.listDir(id, '/work/deep');
    expect(entry).toMatchObject({ name: 'bin.dat', type: 'file', size: 6 });
    expect(Math.abs(Date.parse(entry.mtime) - Date.now())).toBeLessThan(60_000);
    await runtime.move(id, '/work/deep/bin.dat', '/work/moved/b.dat');
    await expect(runtime.readFile(id, '/work/deep/bin.dat')).rejects.toMatchObject({ code: 'FileNotFound' });
    expect((await runtime.readFile(id, '/work/moved/b.dat')).length).toBe(6);
    await expect(runtime.remove(id, '/work/moved')).rejects.toMatchObject({ code: 'DirectoryNotEmpty' });
    await runtime.remove(id, '/work/moved', { recursive: true });
    await expect(runtime.listDir(id, '/work/moved')).rejects.toMatchObject({ code: 'FileNotFound' });
    await expect(runtime.readFile(id, '/work')).rejects.toMatchObject({ code: 'IsADirectory' });
    await expect(runtime.listDir(id, '/root/rel.txt')).rejects.toMatchObject({ code: 'NotADirectory' });
    const odd = "/tmp/we'ird $(name)\n;x";
    await runtime.writeFile(id, odd, Buffer.from('ok'));
    expect((await runtime.readFile(id, odd)).toString()).toBe('ok');
  });

  it('resolves symlinks inside the sandbox only', async () => {
    await runtime.exec(id, 'ln -s /work/main /root/to-nube; ln -s /etc/hostname /root/to-hostname');
    await expect(runtime.readFile(id, '/root/to-nube/package.json')).rejects.toMatchObject({ code: 'FileNotFound' });
    expect((await runtime.readFile(id, '/root/to-hostname')).toString()).toBe(`${id}\n`);
    await runtime.exec(id, 'ln -s / /root/up');
    await runtime.writeFile(id, '/root/up/root/escaped', Buffer.from('x'));
    expect((await runtime.exec(id, 'cat /root/escaped')).stdout).toBe('x');
    // Shell commands walk the same path the same way, but under Debian bookworm's runsc, which walks it
    // to `/` (the files API works around it there; see oldRunsc).
    const walked = (await runtime.exec(id, 'cat /root/up/root/escaped; test -L /root/up/root/up && echo link')).stdout;
    expect(walked).toBe(driver === 'gvisor' && OLD_RUNSC ? '' : 'xlink\n');
  });

  it('applies a unified diff, and a failing one changes nothing', async () => {
    await runtime.writeFile(id, '/srv/app/a.txt', Buffer.from('one\ntwo\nthree\n'));
    await runtime.writeFile(id, '/srv/app/b.txt', Buffer.from('alpha\n'));
    const good = [
      '--- a/a.txt',
      '+++ b/a.txt',
      '@@ -1,3 +1,3 @@',
      ' one',
      '-two',
      '+TWO',
      ' three',
      '--- /dev/null',
      '+++ b/new.txt',
      '@@ -0,0 +1 @@',
      '+created',
      '',
    ].join('\n');
    expect(await runtime.applyPatch(id, good, { cwd: '/srv/app' })).toEqual({ files: ['a.txt', 'new.txt'] });
    expect((await runtime.readFile(id, '/srv/app/a.txt')).toString()).toBe('one\nTWO\nthree\n');
    expect((await runtime.readFile(id, '/srv/app/new.txt')).toString()).toBe('created\n');
    // First file would apply, second does not: nothing may change.
    const bad = [
      '--- a/b.txt',
      '+++ b/b.txt',
      '@@ -1 +1 @@',
      '-alpha',
      '+ALPHA',
      '--- a/a.txt',
      '+++ b/a.txt',
      '@@ -1,3 +1,3 @@',
      ' one',
      '-missing line',
      '+x',
      ' three',
      '',
    ].join('\n');
    await expect(runtime.applyPatch(id, bad, { cwd: '/srv/app' })).rejects.toMatchObject({ code: 'PatchFailed' });
    expect((await runtime.readFile(id, '/srv/app/b.txt')).toString()).toBe('alpha\n');
    expect((await runtime.readFile(id, '/srv/app/a.txt')).toString()).toBe('one\nTWO\nthree\n');
    await expect(runtime.applyPatch(id, 'not a diff', {})).rejects.toMatchObject({ code: 'PatchFailed' });
  });
});
