// The gVisor exec agent (nube-agent as the sandbox's init, reached over a host unix socket): what an
// exec through it does, that it is the path taken, and what happens when root inside kills it.
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanup, DRIVERS, newRuntime, testRuntime, uniqueId } from '../namespaces/test-env.js';
import { STATIC_SH_DIR } from '../static-sh.js';
import { gvisorEnv, oldRunsc, runscBuild } from './runsc.js';

// This file's own bridge and cgroup parent (the subnet given to the gVisor agent work).
const EXTRA = { bridge: { name: 'nubeg0', cidr: '10.123.0.1/16' }, cgroupParent: 'nube-g18' };
// Which process started the command: the agent's worker, or nube-run under `runsc exec`.
const PARENT = 'tr "\\0" " " < /proc/$PPID/cmdline';
const PRELOAD = gvisorEnv(runscBuild(spawnSync('runsc', ['--version']).stdout?.toString() ?? '')).LD_PRELOAD ?? '';

describe('runsc versions', () => {
  it('reads the build date and preloads the statx fix only before 2024', () => {
    expect(runscBuild('runsc version 0.0~20240729.0\nspec: 1.0.2-dev')).toBe(20240729);
    expect(runscBuild('runsc version release-20250106.0')).toBe(20250106);
    expect(runscBuild('runsc version VERSION_MISSING')).toBe(0);
    expect(gvisorEnv(20221219)).toEqual({ LD_PRELOAD: '/.nube/statx-fix.so' });
    expect(gvisorEnv(20240729)).toEqual({});
    expect(gvisorEnv(0)).toEqual({});
    expect([oldRunsc(20221219), oldRunsc(20240729), oldRunsc(0)]).toEqual([true, false, false]);
  });
});

describe.skipIf(!DRIVERS.includes('gvisor'))('gvisor exec agent', () => {
  const { runtime, dataDir, opts } = testRuntime('agent', EXTRA, 'gvisor');

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(() => cleanup(runtime, dataDir), 60_000);

  it('runs exec on the agent: exit codes, env, cwd, stdin, large output, deadline, leftovers killed', async () => {
    const id = uniqueId('ag');
    await runtime.create({ id, env: { FROM_CREATE: 'c' } });
    expect((await runtime.exec(id, PARENT)).stdout).toContain('/.nube/nube-agent');
    expect((await runtime.exec(id, 'exit 3')).exitCode).toBe(3);
    expect((await runtime.exec(id, 'kill -TERM $$')).exitCode).toBe(143);
    expect((await runtime.exec(id, 'pwd')).stdout).toBe('/root\n');
    expect((await runtime.exec(id, 'pwd', { cwd: '/tmp' })).stdout).toBe('/tmp\n');
    const nocwd = await runtime.exec(id, 'pwd', { cwd: '/nonexistent' });
    expect(nocwd.exitCode).not.toBe(0);
    const env = await runtime.exec(id, 'echo $X $FROM_CREATE; id -u; echo "[$LD_PRELOAD]"; stat -c %F /root', { env: { X: 'y z' } });
    // The statx fix is preloaded only under a runsc that needs it (see gvisorEnv); stat works either way.
    expect(env.stdout).toBe(`y z c\n0\n[${PRELOAD}]\ndirectory\n`);
    // stdin larger than one frame and than a pipe's buffer, exact to the byte.
    const input = Buffer.alloc(3_000_000, 7);
    expect((await runtime.exec(id, 'wc -c', { stdin: input })).stdout.trim()).toBe('3000000');
    const both = await runtime.exec(id, 'echo out; echo err >&2; exit 5');
    expect([both.stdout, both.stderr, both.exitCode]).toEqual(['out\n', 'err\n', 5]);
    const big = await runtime.exec(id, 'head -c 4000000 /dev/zero | tr "\\0" a', { maxOutputBytes: 5_000_000 });
    expect(big.stdout.length).toBe(4_000_000);
    expect(big.truncated).toBe(false);
    const capped = await runtime.exec(id, 'head -c 5000000 /dev/zero', { maxOutputBytes: 1000 });
    expect([capped.stdout.length, capped.truncated]).toEqual([1000, true]);
    // (Not `setsid` here: this gVisor has no child subreaper, orphans go to pid 1, and a process that
    // left the command's group is not found by the sweep at the deadline; see docs/decisions.md.)
    const t = await runtime.exec(id, 'sleep 300 & sleep 301 & sleep 302; echo never', { timeoutMs: 500 });
    expect([t.timedOut, t.exitCode, t.stdout]).toEqual([true, 137, '']);
    expect(t.durationMs).toBeLessThan(60_000);
    await runtime.exec(id, 'sleep 100 & setsid sleep 101 & echo ok');
    const left = await runtime.exec(id, "ps -eo args= | grep -c '^sleep [0-9]' || true");
    expect(left.stdout.trim()).toBe('0');
    await runtime.destroy(id);
  }, 180_000);

  // The static sh (scripts/install-static-sh.sh; CI installs it, elsewhere the test needs it installed).
  it.skipIf(!process.env.CI && !existsSync(`${STATIC_SH_DIR}/sh`))(
    "sh -c runs the static sh while /bin/sh is Debian's dash and the same file, the sandbox's own /bin/sh otherwise",
    async () => {
      const id = uniqueId('sh');
      await runtime.create({ id });
      const shell = 'readlink /proc/$$/exe; echo "$0" ~root "[$BASH_VERSION]"';
      const r = await runtime.exec(id, `${shell}; no-such-command`);
      // The same dash: its $0, its error messages, ~user through /etc/passwd.
      expect([r.stdout, r.stderr, r.exitCode]).toEqual(['/.nube/sh\n/bin/sh /root []\n', '/bin/sh: 1: no-such-command: not found\n', 127]);
      // Its command line is the command's (the wait mode's argv is rewritten), as ps shows any sh's.
      expect((await runtime.exec(id, 'ps -o args= -p $$')).stdout).toMatch(/^\/bin\/sh -c ps -o args= -p \$\$\s*\n$/);
      // /bin/sh made bash: bash runs; made dash again (the very file checked at start): the static one.
      await runtime.exec(id, 'ln -sf bash /bin/sh');
      expect((await runtime.exec(id, shell)).stdout).toMatch(/^\/usr\/bin\/bash\n\/bin\/sh \/root \[5\./);
      await runtime.exec(id, 'ln -sf dash /bin/sh');
      expect((await runtime.exec(id, shell)).stdout).toBe('/.nube/sh\n/bin/sh /root []\n');
      // dash rewritten in place with the same bytes: no longer the file checked at start.
      await runtime.exec(id, 'cp /usr/bin/dash /tmp/d && cat /tmp/d > /usr/bin/dash');
      expect((await runtime.exec(id, shell)).stdout).toBe('/usr/bin/dash\n/bin/sh /root []\n');
      await runtime.destroy(id);
    },
    120_000,
  );

  it('streams output as it comes and an abort kills the command', async () => {
    const id = uniqueId('as');
    await runtime.create({ id });
    const chunks: string[] = [];
    const ac = new AbortController();
    const started = Date.now();
    const r = await runtime.execStream(id, ['/bin/sh', '-c', 'echo first; sleep 100; echo never'], { signal: ac.signal }, {
      stdout: (c) => {
        chunks.push(c.toString());
        ac.abort();
      },
      stderr: () => {},
    });
    expect(chunks.join('')).toBe('first\n');
    expect(r.exitCode).toBe(137);
    expect(Date.now() - started).toBeLessThan(60_000);
    let left = '';
    for (let i = 0; i < 50 && left !== '0'; i++) {
      left = (await runtime.exec(id, "ps -eo args= | grep -c '^sleep 100' || true")).stdout.trim();
      if (left !== '0') await new Promise((res) => setTimeout(res, 100));
    }
    expect(left).toBe('0');
    await runtime.destroy(id);
  }, 120_000);

  it('answers many concurrent execs, each with its own output', async () => {
    const id = uniqueId('ac');
    await runtime.create({ id });
    const n = 24;
    const rs = await Promise.all(Array.from({ length: n }, (_, i) => runtime.exec(id, `echo ${i}; echo e${i} >&2; exit ${i % 7}`)));
    rs.forEach((r, i) => {
      expect([r.stdout, r.stderr, r.exitCode]).toEqual([`${i}\n`, `e${i}\n`, i % 7]);
    });
    // The files API goes the same way.
    await runtime.writeFile(id, '/root/f.bin', Buffer.alloc(200_000, 3));
    expect((await runtime.readFile(id, '/root/f.bin')).length).toBe(200_000);
    await runtime.destroy(id);
  }, 180_000);

  it('root inside killing the agent: commands go by runsc exec, and the agent socket leads nowhere else', async () => {
    const id = uniqueId('ak');
    await runtime.create({ id });
    // A host service on a unix socket the sandbox must not reach (nor by a symlink to its host path).
    const probe = `/run/nube-agent-probe-${process.pid}.sock`;
    const server = createServer((_, res) => res.end('host secret'));
    await new Promise<void>((r) => server.listen(probe, r));
    try {
      const curl = (path: string) => `curl -sS -m 3 --unix-socket ${path} http://x/ 2>&1; echo " rc=$?"`;
      const reach = await runtime.exec(id, `ln -sf ${probe} /tmp/probe; ${curl(probe)}; ${curl('/tmp/probe')}; ${curl('/.nube-agent/s')}`);
      expect(reach.stdout).not.toContain('host secret');
      expect(reach.stdout).not.toMatch(/ rc=0$/m);
      // Not removable from inside either (read-only mount).
      expect((await runtime.exec(id, 'rm -f /.nube-agent/s 2>&1; ls /.nube-agent')).stdout).toContain('s');
      expect((await runtime.exec(id, PARENT)).stdout).toContain('/.nube/nube-agent');

      // Every agent process but pid 1 (the command doing it is on one of them: its answer is lost).
      await runtime.exec(id, 'kill -9 $(pgrep -x nube-agent | grep -vx 1)');
      const after = await runtime.exec(id, `${PARENT}; echo; pgrep -x nube-agent | tr "\\n" " "; echo $X`, { env: { X: 'still' } });
      expect(after.exitCode).toBe(0);
      expect(after.stdout).toContain('/.nube/nube-run');
      expect(after.stdout).toContain('\n1 still');
      expect((await runtime.exec(id, 'exit 4')).exitCode).toBe(4);
      expect((await runtime.exec(id, 'cat', { stdin: 'piped' })).stdout).toBe('piped');
      expect((await runtime.exec(id, 'sleep 300; echo never', { timeoutMs: 500 })).timedOut).toBe(true);
      const again = await runtime.exec(id, curl(probe));
      expect(again.stdout).not.toContain('host secret');
    } finally {
      server.close();
      rmSync(probe, { force: true });
    }
    // A restart (suspend, resume) brings the agent back.
    await runtime.suspend(id);
    await runtime.resume(id);
    expect((await runtime.exec(id, PARENT)).stdout).toContain('/.nube/nube-agent');
    await runtime.destroy(id);
  }, 180_000);

  it('a restarted nube finds a running sandbox: runsc exec until the agent has reconnected, then the agent', async () => {
    const id = uniqueId('ar');
    const first = newRuntime('gvisor', opts);
    await first.create({ id });
    expect((await first.exec(id, PARENT)).stdout).toContain('/.nube/nube-agent');
    await first.close();
    const second = newRuntime('gvisor', opts);
    expect((await second.exec(id, 'echo hi')).stdout).toBe('hi\n');
    let parent = '';
    for (let i = 0; i < 40 && !parent.includes('nube-agent'); i++) {
      await new Promise((r) => setTimeout(r, 250));
      parent = (await second.exec(id, PARENT)).stdout;
    }
    expect(parent).toContain('/.nube/nube-agent');
    await second.destroy(id);
  }, 180_000);
});
