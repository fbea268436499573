import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxRuntimeError } from '../driver.js';
import { run } from './proc.js';
import { cleanup, DRIVERS, newRuntime, testRuntime, uniqueId } from './test-env.js';

describe.each(DRIVERS)('%s runtime: lifecycle', (driver) => {
  const { runtime, dataDir, opts } = testRuntime('lifecycle', {}, driver);
  // pid 2 inside is the init's `sleep infinity`; count only the sleeps a test started.
  const COUNT_SLEEPS = "ps -eo args= | grep -c '^sleep [0-9]' || true";

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(() => cleanup(runtime, dataDir), 60_000);

  it('creates a sandbox with its own hostname, env, address and root inside', async () => {
    const id = uniqueId('lc');
    const sb = await runtime.create({ id, env: { GREETING: 'hola' } });
    expect(sb.state).toBe('running');
    const r = await runtime.exec(id, 'id -u; hostname; echo $GREETING; ip -4 -o addr show eth0');
    expect(r.exitCode).toBe(0);
    const [uid, host, greeting, addr] = r.stdout.trim().split('\n');
    expect(uid).toBe('0');
    expect(host).toBe(id);
    expect(greeting).toBe('hola');
    expect(addr).toContain(`${sb.address}/16`);
    expect(await runtime.addressOf(id)).toBe(sb.address);
    await runtime.destroy(id);
  });

  it('exec: exit codes, cwd, env, stdin, output cap, deadline kills the process group', async () => {
    const id = uniqueId('ex');
    await runtime.create({ id });
    expect((await runtime.exec(id, 'exit 3')).exitCode).toBe(3);
    expect((await runtime.exec(id, 'pwd', { cwd: '/tmp' })).stdout).toBe('/tmp\n');
    expect((await runtime.exec(id, 'echo $X', { env: { X: 'y' } })).stdout).toBe('y\n');
    expect((await runtime.exec(id, 'cat', { stdin: 'piped' })).stdout).toBe('piped');
    const big = await runtime.exec(id, 'head -c 5000000 /dev/zero', { maxOutputBytes: 1000 });
    expect(big.stdout.length).toBe(1000);
    expect(big.truncated).toBe(true);
    const t = await runtime.exec(id, 'sleep 300 & sleep 300; echo never', { timeoutMs: 500 });
    expect(t.timedOut).toBe(true);
    expect(t.stdout).toBe('');
    // Killed at the deadline, not after the sleeps' 300 s (a generous bound: the machine may be busy).
    expect(t.durationMs).toBeLessThan(60_000);
    expect((await runtime.exec(id, COUNT_SLEEPS)).stdout.trim()).toBe('0');
    // A background child started inside exec dies when the shell ends, even one that left the group.
    await runtime.exec(id, 'sleep 100 & setsid sleep 101 & echo ok');
    expect((await runtime.exec(id, COUNT_SLEEPS)).stdout.trim()).toBe('0');
    await runtime.destroy(id);
  }, 180_000);

  it('destroy frees processes, mount, netns, veth, cgroups and dirs', async () => {
    const id = uniqueId('de');
    await runtime.create({ id });
    const pid = await runtime.initPid(id);
    // The mount point is in the run dir (reachable by the sandbox's uid), the files in the data dir.
    const merged = `${runtime.runDir}/${id}/merged`;
    expect((await readFile('/proc/self/mountinfo', 'utf8')).includes(merged)).toBe(true);
    await runtime.destroy(id);
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect((await readFile('/proc/self/mountinfo', 'utf8')).includes(merged)).toBe(false);
    expect(existsSync(`${runtime.runDir}/${id}`)).toBe(false);
    expect(existsSync(`/run/netns/nb-${id}`)).toBe(false);
    expect(existsSync(`/sys/fs/cgroup/pids/nube-test/${id}`)).toBe(false);
    expect(existsSync(`/sys/fs/cgroup/memory/nube-test/${id}`)).toBe(false);
    expect(existsSync(runtime.sandboxDir(id))).toBe(false);
    const links = await run('ip', ['-o', 'link', 'show', 'master', 'nubet0']);
    expect(links.stdout).not.toContain(`nb-${id}`);
    await expect(runtime.exec(id, 'true')).rejects.toMatchObject({ code: 'NotFound' });
  });

  it('a start that fails says why and leaves nothing behind; the same id starts afterwards', async () => {
    const id = uniqueId('sf');
    // Something already holds the sandbox's netns name: the helper's launch refuses it.
    await writeFile(`/run/netns/nb-${id}`, '');
    await expect(runtime.create({ id })).rejects.toThrow(new RegExp(`/run/netns/nb-${id}: File exists`));
    expect((await readFile('/proc/self/mountinfo', 'utf8')).includes(`${runtime.runDir}/${id}/merged`)).toBe(false);
    expect(existsSync(`${runtime.runDir}/${id}`)).toBe(false);
    expect(existsSync(`${dataDir}/sandboxes/${id}`)).toBe(false);
    expect(existsSync(`/sys/fs/cgroup/pids/nube-test/${id}`)).toBe(false);
    expect(existsSync(`/sys/fs/cgroup/memory/nube-test/${id}`)).toBe(false);
    expect((await run('ip', ['-o', 'link', 'show', 'master', 'nubet0'])).stdout).not.toContain(`nb-${id}`);
    expect(await runtime.get(id)).toBeNull();
    // The teardown took the stale name away with the rest, so a second try starts.
    await runtime.create({ id });
    expect((await runtime.exec(id, 'hostname')).stdout).toBe(`${id}\n`);
    await runtime.destroy(id);
  });

  it('suspend keeps files and frees processes; resume rewrites env', async () => {
    const id = uniqueId('su');
    await runtime.create({ id, env: { PHASE: 'one' } });
    await runtime.exec(id, 'echo kept > /root/note; sleep 1000 >/dev/null 2>&1 &');
    const pid = await runtime.initPid(id);
    const s = await runtime.suspend(id);
    expect(s.state).toBe('suspended');
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(existsSync(`/run/netns/nb-${id}`)).toBe(false);
    expect(existsSync(`/sys/fs/cgroup/pids/nube-test/${id}`)).toBe(false);
    await expect(runtime.exec(id, 'true')).rejects.toBeInstanceOf(SandboxRuntimeError);
    const t0 = performance.now();
    await runtime.resume(id, { env: { PHASE: 'two' } });
    console.log(`resume: ${(performance.now() - t0).toFixed(1)} ms`);
    const r = await runtime.exec(id, `cat /root/note; echo $PHASE; ${COUNT_SLEEPS}`);
    expect(r.stdout).toBe('kept\ntwo\n0\n');
    await runtime.destroy(id);
  });

  it('suspend with keepMemory freezes processes in place: a resume (also by a new runtime) carries on', async () => {
    const id = uniqueId('km');
    await runtime.create({ id });
    // A counter a background loop bumps every 50 ms, and a process whose pid must survive.
    await runtime.exec(id, 'echo 0 > /root/n');
    await runtime.startBackground(id, 'while :; do echo $(( $(cat /root/n) + 1 )) > /root/n.t && mv /root/n.t /root/n; sleep 0.05; done');
    const bgSleep = await runtime.startBackground(id, 'echo $$ > /root/pid; exec sleep 1000');
    const pid = await runtime.initPid(id);
    let sleeper = '';
    for (let i = 0; i < 100 && !sleeper; i++) sleeper = (await runtime.exec(id, 'cat /root/pid 2>/dev/null')).stdout.trim();
    const s = await runtime.suspend(id, { keepMemory: true });
    expect(s).toMatchObject({ state: 'suspended', memoryKept: true });
    expect(existsSync(`/proc/${pid}`)).toBe(true);
    await expect(runtime.exec(id, 'true')).rejects.toBeInstanceOf(SandboxRuntimeError);
    // Frozen: the counter does not move while suspended (read from the host, on the upper dir).
    const count = async () => Number((await readFile(`${runtime.runDir}/${id}/merged/root/n`, 'utf8')).trim());
    const before = await count();
    await new Promise((r) => setTimeout(r, 400));
    expect(await count()).toBe(before);
    // nube restarts meanwhile: the frozen sandbox stays as it is.
    const again = newRuntime(driver, opts);
    await again.recover();
    expect(await again.get(id)).toMatchObject({ state: 'suspended', memoryKept: true });
    const r = await again.resume(id);
    expect(r).toMatchObject({ state: 'running', memoryKept: false });
    expect(await again.initPid(id)).toBe(pid);
    expect((await again.exec(id, `kill -0 ${sleeper} && echo alive`)).stdout).toBe('alive\n');
    await new Promise((r) => setTimeout(r, 400));
    expect(await count()).toBeGreaterThan(before);
    // Suspended with memory, then without: the processes go, the files stay.
    await again.suspend(id, { keepMemory: true });
    expect(await again.suspend(id)).toMatchObject({ state: 'suspended', memoryKept: false });
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    await again.resume(id);
    expect(await again.getBackground(id, bgSleep)).toMatchObject({ state: 'exited' });
    expect((await again.exec(id, 'cat /root/pid')).stdout).toBe(`${sleeper}\n`);
    await again.destroy(id);
  }, 180_000);

  it('snapshot and fork: copy-on-write children, the parent keeps running', async () => {
    const id = uniqueId('fk');
    await runtime.create({ id });
    await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && echo parent > /root/who && sync');
    const t0 = performance.now();
    const kids = await runtime.fork(id, [`${id}-a`, `${id}-b`]);
    const forkMs = performance.now() - t0;
    console.log(`fork of a 100 MB sandbox into 2: ${forkMs.toFixed(0)} ms`);
    expect(kids.map((k) => k.state)).toEqual(['running', 'running']);
    expect(kids[0].layers.length).toBe(1);
    // Copy-on-write: one snapshot of the parent under both children, not a copy each.
    expect(kids[1].layers).toEqual(kids[0].layers);
    const sum = async (sid: string) => (await runtime.exec(sid, 'md5sum < /root/big')).stdout;
    expect(await sum(kids[0].id)).toBe(await sum(id));
    await runtime.exec(kids[0].id, 'echo child > /root/who');
    expect((await runtime.exec(id, 'cat /root/who')).stdout).toBe('parent\n');
    expect((await runtime.exec(kids[1].id, 'cat /root/who')).stdout).toBe('parent\n');
    expect((await runtime.exec(kids[0].id, 'cat /root/who')).stdout).toBe('child\n');
    await expect(runtime.deleteSnapshot(kids[0].layers[0])).rejects.toMatchObject({ code: 'SnapshotInUse' });
    // A fork of a fork stacks layers.
    const [grand] = await runtime.fork(kids[0].id, [`${id}-c`]);
    expect(grand.layers.length).toBe(2);
    expect((await runtime.exec(grand.id, 'cat /root/who')).stdout).toBe('child\n');
    for (const k of [grand.id, ...kids.map((x) => x.id)]) await runtime.destroy(k);
    await runtime.deleteSnapshot(grand.layers[0]);
    await runtime.deleteSnapshot(kids[0].layers[0]);
    await runtime.destroy(id);
    // How long a fork takes is for bench/sandboxes; on a busy machine copying 100 MB took over a second.
  }, 300_000);

  it('background processes: logs from an offset, kill with grace, exit codes', async () => {
    const id = uniqueId('bg');
    await runtime.create({ id });
    const a = await runtime.startBackground(id, 'echo one; echo err >&2; sleep 0.3; echo two; exit 4');
    const b = await runtime.startBackground(id, "trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.1; done");
    const c = await runtime.startBackground(id, "trap '' TERM; exec sleep 1000");
    // Until `a` has ended and `b` is up, however long that takes on a busy machine.
    for (let i = 0; i < 600; i++) {
      const [sa, sb] = [await runtime.getBackground(id, a), await runtime.getBackground(id, b)];
      if (sa.state === 'exited' && sb.stdout === 'up\n') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const da = await runtime.getBackground(id, a);
    expect(da).toMatchObject({ state: 'exited', exitCode: 4, stdout: 'one\ntwo\n', stderr: 'err\n' });
    const tail = await runtime.getBackground(id, a, { stdoutOffset: 4 });
    expect(tail.stdout).toBe('two\n');
    expect(tail.stdoutNextOffset).toBe(8);
    expect((await runtime.listBackground(id)).map((p) => p.execId).sort()).toEqual([a, b, c].sort());
    expect((await runtime.getBackground(id, b)).state).toBe('running');
    await runtime.killBackground(id, b, 5);
    expect(await runtime.getBackground(id, b)).toMatchObject({ state: 'exited', exitCode: 0, stdout: 'up\nbye\n' });
    const t0 = Date.now();
    await runtime.killBackground(id, c, 1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
    expect(await runtime.getBackground(id, c)).toMatchObject({ state: 'exited', exitCode: 137 });
    await expect(runtime.getBackground(id, 'bg_00')).rejects.toMatchObject({ code: 'NotFound' });
    await runtime.destroy(id);
  }, 180_000);

  it('a new runtime on the same data dir re-adopts running sandboxes and restarts dead ones', async () => {
    const id = uniqueId('ra');
    const id2 = uniqueId('rb');
    await runtime.create({ id });
    await runtime.create({ id: id2 });
    await runtime.exec(id2, 'echo survives > /root/file');
    const bgId = await runtime.startBackground(id, 'echo started; exec sleep 1000');
    const pid = await runtime.initPid(id);
    const pid2 = await runtime.initPid(id2);
    process.kill(pid2, 'SIGKILL'); // its processes die while nube is "down"
    const again = newRuntime(driver, opts);
    const found = await again.recover();
    expect(found.map((s) => s.id)).toEqual(expect.arrayContaining([id, id2]));
    expect(await again.initPid(id)).toBe(pid);
    expect(await again.getBackground(id, bgId)).toMatchObject({ state: 'running', stdout: 'started\n' });
    expect(await again.initPid(id2)).not.toBe(pid2);
    expect((await again.exec(id2, 'cat /root/file')).stdout).toBe('survives\n');
    expect((await again.exec(id, 'hostname')).stdout).toBe(`${id}\n`);
    await again.killBackground(id, bgId, 0);
    await again.destroy(id);
    await again.destroy(id2);
  });

  it('a sandbox an earlier nube mounted inside the data dir is restarted from the run dir', async () => {
    const id = uniqueId('lg');
    await runtime.create({ id });
    await runtime.exec(id, 'echo kept > /root/file');
    // Before the run dir, the overlay was mounted at <data>/sandboxes/<id>/merged.
    const legacy = `${runtime.sandboxDir(id)}/merged`;
    await run('mkdir', ['-p', legacy]);
    await run('mount', ['--bind', `${runtime.runDir}/${id}/merged`, legacy]);
    const again = newRuntime(driver, opts);
    await again.recover();
    const mounts = await readFile('/proc/self/mountinfo', 'utf8');
    expect(mounts.includes(` ${legacy} `)).toBe(false);
    expect(mounts.includes(` ${runtime.runDir}/${id}/merged `)).toBe(true);
    expect((await again.exec(id, 'cat /root/file')).stdout).toBe('kept\n');
    await again.destroy(id);
    expect(existsSync(runtime.sandboxDir(id))).toBe(false);
  });
});
