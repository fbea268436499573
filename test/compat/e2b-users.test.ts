// The real `e2b` SDK against nube: E2B's `user` account. Commands run as `user` (home /home/user,
// passwordless sudo, `python` on PATH) unless they name another; files written through envd belong to
// the user the call names, whose home relative paths start from.
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;

describe('e2b SDK: the user account', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-users');
    sbx = await Sandbox.create({ timeoutMs: 300_000 });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('runs commands as `user` in /home/user, with passwordless sudo and python', async () => {
    const r = await sbx.commands.run('echo "$(whoami) $(id -u) $HOME $USER $(pwd)"; python --version');
    expect(r.stdout).toMatch(/^user 1000 \/home\/user user \/home\/user\nPython 3\./);
    expect((await sbx.commands.run('sudo whoami')).stdout).toBe('root\n');
    // Root's files stay root's: the user cannot read them without sudo.
    await expect(sbx.commands.run('cat /etc/shadow')).rejects.toThrow(/exit status 1/);
    expect((await sbx.commands.run('sudo cat /etc/shadow')).stdout).toMatch(/^root:/);
    // A variable of one command does not reach the next one, not even through sudo.
    expect((await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })).stdout).toBe('bar\n');
    expect((await sbx.commands.run('sudo echo "[$FOO]"')).stdout).toBe('[]\n');
  });

  it("runs as root when asked, in root's home", async () => {
    const r = await sbx.commands.run('echo "$(whoami) $HOME $(pwd)"', { user: 'root' });
    expect(r.stdout).toBe('root /root /root\n');
  });

  it('writes files as the user the call names, relative paths from that home', async () => {
    const mine = await sbx.files.write('notes/mine.txt', 'x');
    expect(mine.path).toBe('/home/user/notes/mine.txt');
    const st = await sbx.files.getInfo('notes/mine.txt');
    expect(st).toMatchObject({ owner: 'user', group: 'user', permissions: '-rw-r--r--' });
    expect(await sbx.files.getInfo('notes')).toMatchObject({ owner: 'user', permissions: 'drwxr-xr-x' });
    const roots = await sbx.files.write('mine.txt', 'y', { user: 'root' });
    expect(roots.path).toBe('/root/mine.txt');
    expect(await sbx.files.getInfo('/root/mine.txt')).toMatchObject({ owner: 'root', group: 'root' });
    expect((await sbx.commands.run('stat -c %U:%G /home/user/notes/mine.txt /root/mine.txt', { user: 'root' })).stdout).toBe('user:user\nroot:root\n');
    // envd's file API is root's: it may write anywhere, and what it writes is the user's.
    await sbx.files.write('/opt/shared/for-user.txt', 'z');
    expect((await sbx.commands.run('stat -c %U /opt/shared /opt/shared/for-user.txt')).stdout).toBe('user\nuser\n');
    expect(await sbx.files.makeDir('/opt/made/by/user')).toBe(true);
    expect((await sbx.commands.run('stat -c %U /opt/made /opt/made/by/user')).stdout).toBe('user\nuser\n');
  });

  it('refuses a user the sandbox does not have', async () => {
    await expect(sbx.commands.run('true', { user: 'nobody-here' as 'user' })).rejects.toThrow(/nobody-here/);
    await expect(sbx.files.write('x.txt', 'x', { user: 'nobody-here' as 'user' })).rejects.toThrow(/nobody-here/);
  });

  it("keeps nube's own API as root", async () => {
    const r = await t.call('POST', `/sandboxes/${sbx.sandboxId.replace('-', '_')}/exec`, { command: 'whoami' });
    expect(r.body.stdout).toBe('root\n');
  });
});
