// The static sh on the namespaces driver: `sh -c` runs it (from the spawner's sealed memfd) while the
// sandbox's /bin/sh is Debian's dash byte for byte, and the sandbox's own /bin/sh otherwise.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STATIC_SH_DIR } from '../static-sh.js';
import { cleanup, testRuntime, uniqueId } from './test-env.js';

// Something of the host's environment the spawner inherits, which must never reach a sandbox.
process.env.NUBE_TEST_HOST_ONLY = 'host-secret-7f3a';

// scripts/install-static-sh.sh; CI installs it, elsewhere the test needs it installed.
describe.skipIf(!process.env.CI && !existsSync(`${STATIC_SH_DIR}/sh`))('namespaces runtime: the static sh', () => {
  const { runtime, dataDir } = testRuntime('static-sh');
  const plain = testRuntime('static-sh-off', { staticShDir: null });
  const id = uniqueId('sh');
  const shell = 'readlink /proc/$$/exe; echo "$0" ~root "[$BASH_VERSION]"';

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
    await runtime.create({ id });
  }, 900_000);
  afterAll(async () => {
    await cleanup(runtime, dataDir);
    await cleanup(plain.runtime, plain.dataDir);
  }, 60_000);

  it("runs for /bin/sh as the same dash: its $0, error text, exit status and ~user", async () => {
    const r = await runtime.exec(id, `${shell}; no-such-command`);
    expect([r.stdout, r.stderr, r.exitCode]).toEqual(['/memfd:nube-sh (deleted)\n/bin/sh /root []\n', '/bin/sh: 1: no-such-command: not found\n', 127]);
    // Named `sh` for ps, top and pgrep, as an exec of /bin/sh names it (not after the memfd), and its
    // command line is the command's (as much as the wait mode's argv had room for), not the wait argv.
    expect((await runtime.exec(id, 'cat /proc/$$/comm; ps -o comm= -p $$')).stdout).toBe('sh\nsh\n');
    expect((await runtime.exec(id, 'tr "\\0" "|" < /proc/$$/cmdline; echo')).stdout).toMatch(/^\/bin\/sh\|-c\|tr "\\0" "\|" < \/proc\/\$\$\/cmdline; echo\|+\n$/);
    expect((await runtime.exec(id, 'pgrep -f "^/bin/sh -c pgrep" >/dev/null && echo found')).stdout).toBe('found\n');
    const long = `echo ${'x'.repeat(300)} > /dev/null; ps -o args= -p $$`;
    expect((await runtime.exec(id, long)).stdout).toMatch(/^\/bin\/sh -c echo x{20,}/);
    // Streamed commands (argv /bin/sh -c) take the same way; a program named directly runs as named.
    const out: string[] = [];
    await runtime.execStream(id, ['/bin/sh', '-c', 'readlink /proc/$$/exe'], {}, { stdout: (c) => out.push(c.toString()), stderr: () => {} });
    expect(out.join('')).toBe('/memfd:nube-sh (deleted)\n');
    expect((await runtime.exec(id, 'exec /usr/bin/dash -c "readlink /proc/\\$\\$/exe"')).stdout).toBe('/usr/bin/dash\n');
    // Root inside cannot change it through /proc/PID/exe (a running program, and a sealed memfd).
    const w = await runtime.exec(id, 'echo x >> /proc/$$/exe');
    expect([w.exitCode, w.stderr]).toEqual([2, expect.stringMatching(/Text file busy|Operation not permitted|Permission denied/)]);
    expect((await runtime.exec(id, 'echo still')).stdout).toBe('still\n');
    // Without it (staticShDir: null), the sandbox's own dash, with the same answers.
    const otherId = uniqueId('sho');
    await plain.runtime.create({ id: otherId });
    const p = await plain.runtime.exec(otherId, `${shell}; no-such-command`);
    expect([p.stdout, p.stderr, p.exitCode]).toEqual(['/usr/bin/dash\n/bin/sh /root []\n', '/bin/sh: 1: no-such-command: not found\n', 127]);
  }, 120_000);

  it('waits for the next command as the static sh already started, with nothing of the host in it', async () => {
    // Between two execs, the next one's process has become the static sh (its wait mode): a process
    // in the background looks at it.
    const bgId = await runtime.startBackground(
      id,
      'for i in $(seq 100); do p=$(pgrep -x nube-sh-wait) && break; sleep 0.05; done; ' +
        'echo "$p"; tr "\\0" " " < /proc/$p/cmdline; echo; tr "\\0" "\\n" < /proc/$p/environ | wc -c; ' +
        'grep -c host-secret-7f3a /proc/$p/environ /proc/$p/cmdline',
    );
    let bg = await runtime.getBackground(id, bgId);
    for (let i = 0; i < 200 && bg.state === 'running'; i++) {
      await new Promise((res) => setTimeout(res, 25));
      bg = await runtime.getBackground(id, bgId);
    }
    const r = { stdout: bg.stdout };
    const [pid, cmdline, envBytes] = r.stdout.split('\n');
    expect(Number(pid)).toBeGreaterThan(1);
    expect(cmdline).toMatch(/^nube-sh-wait h \d+( \d+){7} $/);
    expect(envBytes).toBe('0');
    expect(r.stdout).not.toMatch(/:[1-9]/);
    // It becomes the next command: the same shell, env and cwd as any exec.
    const next = await runtime.exec(id, 'readlink /proc/$$/exe; echo "$0 $HOME $(pwd) [$NUBE_TEST_HOST_ONLY]"', { cwd: '/tmp', env: { HOME: '/root' } });
    expect(next.stdout).toBe('/memfd:nube-sh (deleted)\n/bin/sh /root /tmp []\n');
    // A command that is not `sh -c` is executed by it as named; a missing one and a bad cwd fail as before.
    const direct: string[] = [];
    await runtime.execStream(id, ['cat', '/proc/self/comm'], {}, { stdout: (c) => direct.push(c.toString()), stderr: () => {} });
    expect(direct.join('')).toBe('cat\n');
    const missing = await runtime.execStream(id, ['no-such-program'], {}, { stdout: () => {}, stderr: () => {} });
    expect(missing.exitCode).toBe(127);
    const badCwd = await runtime.exec(id, 'true', { cwd: '/no/such/dir' });
    expect([badCwd.exitCode, badCwd.stderr]).toEqual([126, 'cwd /no/such/dir: No such file or directory\n']);
  }, 120_000);

  it('gives way to whatever /bin/sh the sandbox made: bash, dash again, a dash changed in place', async () => {
    await runtime.exec(id, 'ln -sf bash /bin/sh');
    expect((await runtime.exec(id, shell)).stdout).toMatch(/^\/usr\/bin\/bash\n\/bin\/sh \/root \[5\./);
    await runtime.exec(id, 'ln -sf dash /bin/sh');
    expect((await runtime.exec(id, shell)).stdout).toBe('/memfd:nube-sh (deleted)\n/bin/sh /root []\n');
    // A FIFO for /bin/sh does not hold the command up (only a regular file is read): exec fails at once.
    await runtime.exec(id, 'mv /usr/bin/dash /usr/bin/dash.real && mkfifo /usr/bin/dash');
    const fifo = await runtime.exec(id, 'true', { timeoutMs: 20_000 });
    expect([fifo.timedOut, fifo.exitCode]).toEqual([false, 126]);
    await runtime.execStream(id, ['/usr/bin/dash.real', '-c', 'rm /usr/bin/dash && mv /usr/bin/dash.real /usr/bin/dash'], {}, { stdout: () => {}, stderr: () => {} });
    expect((await runtime.exec(id, 'readlink /proc/$$/exe')).stdout).toBe('/memfd:nube-sh (deleted)\n');
    // Other bytes (one appended: still a program that runs): the sandbox's file runs.
    await runtime.exec(id, 'printf x >> /usr/bin/dash');
    expect((await runtime.exec(id, shell)).stdout).toBe('/usr/bin/dash\n/bin/sh /root []\n');
  }, 120_000);
});
