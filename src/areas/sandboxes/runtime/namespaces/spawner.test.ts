// The spawner (nube-helper serve): execs go through one long-lived helper over a unix socket. What must
// hold besides the exec tests in lifecycle.test.ts: stdin larger than a pipe, a caller that goes away
// kills its command, a dead spawner is replaced, the socket is private; an exec answers once its
// command and what it left are gone, and no exec cgroup is left but the resident session's.
import { existsSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectCgroups } from './cgroups.js';
import { encodeRequest } from './spawner.js';
import { cleanup, testRuntime, uniqueId } from './test-env.js';

const { runtime, dataDir, opts } = testRuntime('spawner');
const socket = `${dataDir}/run/spawner-${process.pid}.sock`;
const COUNT_SLEEPS = "ps -eo args= | grep -c '^sleep [0-9]' || true";
let id = '';

/** Our own spawner's pid, found by its socket path in /proc. */
async function spawnerPid(): Promise<number | undefined> {
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, 'utf8').catch(() => '');
    // `nube-helper serve SOCKET [STATIC_SH_DIR]`, started by this process (its sessions are its forks,
    // with the same command line).
    if (!cmd.includes(`\0serve\0${socket}\0`)) continue;
    const stat = await readFile(`/proc/${d}/stat`, 'utf8').catch(() => '');
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid) return Number(d);
  }
  return undefined;
}

beforeAll(async () => {
  await runtime.ensureTemplate('base', (l) => console.log(l));
  id = uniqueId('sp');
  await runtime.create({ id });
}, 900_000);
afterAll(() => cleanup(runtime, dataDir), 60_000);

describe('namespaces runtime: spawner', () => {
  it('relays stdin larger than a pipe buffer, and a command that ignores its stdin does not hang', async () => {
    const input = Buffer.alloc(3_000_000, 'a');
    const r = await runtime.exec(id, 'wc -c', { stdin: input });
    expect(r.stdout.trim()).toBe('3000000');
    const ignored = await runtime.exec(id, 'echo done', { stdin: input, timeoutMs: 5000 });
    expect(ignored.stdout).toBe('done\n');
    expect(ignored.timedOut).toBe(false);
  });

  it('the socket is private and a NUL in a command is refused before anything runs', async () => {
    expect((await stat(socket)).mode & 0o077).toBe(0);
    await expect(runtime.exec(id, 'echo a\0b')).rejects.toMatchObject({ code: 'InvalidInput' });
  });

  it('a caller that goes away gets its command killed', async () => {
    const cg = detectCgroups(opts.cgroupParent!).sandbox(id);
    const req = encodeRequest(
      {
        target: await runtime.initPid(id),
        cgroups: [],
        execCgroups: cg.execJoin('xgone').execCgroups,
        cwd: '/',
        env: { PATH: '/usr/bin:/bin' },
        argv: ['/bin/sh', '-c', 'sleep 77 & sleep 78'],
      },
      Buffer.alloc(0),
    );
    await new Promise<void>((resolve, reject) => {
      const s = connect(socket, () => s.write(req));
      s.on('error', reject);
      // The first frame is the status "pid P": the command runs; then hang up.
      s.once('data', () =>
        setTimeout(() => {
          s.destroy();
          resolve();
        }, 200),
      );
    });
    let left = '';
    for (let i = 0; i < 500 && left !== '0'; i++) {
      left = (await runtime.exec(id, COUNT_SLEEPS)).stdout.trim();
      if (left !== '0') await new Promise((r) => setTimeout(r, 20));
    }
    expect(left).toBe('0');
  });

  it('an exec answers on its status (what it left is killed first); its exec cgroup goes right after', async () => {
    const pidsDir = `/sys/fs/cgroup/pids/${opts.cgroupParent}/${id}`;
    const execCgroups = async () => (existsSync(pidsDir) ? (await readdir(pidsDir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name) : []);
    // Only on cgroup v1 (this host); the v2 layout is checked in cgroups-v2.test.ts.
    if (!existsSync(pidsDir)) return;
    await runtime.exec(id, 'true');
    const before = await execCgroups();
    for (let i = 0; i < 5; i++) {
      // A child that left the process group: the answer comes only once it is dead.
      const r = await runtime.exec(id, 'setsid sleep 79 & echo started', { timeoutMs: 10_000 });
      expect(r).toMatchObject({ exitCode: 0, stdout: 'started\n', timedOut: false });
      expect((await runtime.exec(id, "ps -eo args= | grep -c '^sleep 79' || true")).stdout.trim()).toBe('0');
    }
    // The execs went one after another through the sandbox's resident session, which keeps one exec
    // cgroup for its commands and one (its name + "-z") for its zygote: nothing else is left.
    let left: string[] = [];
    const residentOnly = (names: string[]) => names.length === 2 && names.includes(`${names.find((n) => !n.endsWith('-z'))}-z`);
    for (let i = 0; i < 100; i++) {
      left = await execCgroups();
      if (residentOnly(left)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    // (Before the fix, a command refused for a NUL took the prepared session and left it waiting.)
    expect(residentOnly(left), JSON.stringify({ before, left })).toBe(true);
  });

  it('a spawner that died is replaced on the next exec', async () => {
    await runtime.exec(id, 'true');
    const pid = await spawnerPid();
    expect(pid).toBeGreaterThan(0);
    process.kill(pid!, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 50));
    // The sandbox's resident session outlives it and answers; an exec beside it needs a new session,
    // so a spawner.
    const r = await runtime.exec(id, 'echo back');
    expect(r.stdout).toBe('back\n');
    const both = await Promise.all([runtime.exec(id, 'sleep 0.3; echo again'), runtime.exec(id, 'echo beside')]);
    expect(both.map((x) => x.stdout)).toEqual(['again\n', 'beside\n']);
    const again = await spawnerPid();
    expect(again).toBeGreaterThan(0);
    expect(again).not.toBe(pid);
  });
});
