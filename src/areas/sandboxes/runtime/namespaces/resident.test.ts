// A sandbox's resident session (helper/resident.c): its commands are made by one process inside it,
// the zygote. What must hold: root inside can see it but not read it, it carries nothing of nube's,
// and whatever root inside does to it (kill it, stop it, kill the process waiting for the next
// command) costs at most the next exec a session of its own; a timed-out command leaves it serving.
import { readdir, readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanup, testRuntime, uniqueId } from './test-env.js';

// Something of nube's environment, which must not reach the spawner, so neither a zygote.
process.env.NUBE_TEST_RESIDENT_SECRET = 'resident-secret-5c1e';

const { runtime, dataDir } = testRuntime('resident');
const id = uniqueId('rs');

async function sh(command: string, timeoutMs?: number) {
  return runtime.exec(id, command, { timeoutMs });
}

async function zygote(): Promise<string> {
  return (await sh('pgrep -x nube-zygote || true')).stdout.trim();
}

/** Host pids of every nube-zygote here, with their environment. */
async function hostZygotes(): Promise<{ pid: string; environ: string }[]> {
  const out: { pid: string; environ: string }[] = [];
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const comm = await readFile(`/proc/${d}/comm`, 'utf8').catch(() => '');
    if (comm.trim() === 'nube-zygote') out.push({ pid: d, environ: await readFile(`/proc/${d}/environ`, 'utf8').catch(() => '') });
  }
  return out;
}

beforeAll(async () => {
  await runtime.ensureTemplate('base', (l) => console.log(l));
  await runtime.create({ id });
}, 900_000);
afterAll(() => cleanup(runtime, dataDir), 60_000);

describe('namespaces runtime: the resident session', () => {
  it('one zygote makes the commands: named for what it is, closed to root inside, nothing of nube in it', async () => {
    const z = await zygote();
    expect(z).toMatch(/^\d+$/);
    // The same zygote for command after command.
    for (let i = 0; i < 3; i++) expect(await zygote()).toBe(z);
    // Its command line says what it is and nothing of the host (no data dir, no socket path).
    expect((await sh(`tr -d '\\0' < /proc/${z}/cmdline`)).stdout).toBe('nube-zygote');
    // Root inside may see it but not open its descriptors, environment or memory, nor trace it.
    const peek = await sh(`ls /proc/${z}/fd; cat /proc/${z}/environ; head -c1 /proc/${z}/mem; readlink /proc/${z}/cwd`);
    // (readlink fails without a word: its empty output says it.)
    expect(peek.stdout).toBe('');
    expect(peek.stderr.match(/Permission denied/g)?.length, peek.stderr).toBe(3);
    expect(peek.exitCode).not.toBe(0);
    // The spawner starts with only PATH: no zygote on this host holds nube's environment.
    const host = await hostZygotes();
    expect(host.length).toBeGreaterThan(0);
    for (const h of host) expect(h.environ).not.toContain('resident-secret-5c1e');
  });

  it('a command that times out leaves the resident session serving', async () => {
    const z = await zygote();
    const r = await sh('sleep 5', 300);
    expect([r.timedOut, r.exitCode]).toEqual([true, 137]);
    expect((await sh('echo after')).stdout).toBe('after\n');
    expect(await zygote()).toBe(z);
  });

  it('a zygote killed from inside costs the next exec a session of its own, then there is a new one', async () => {
    const z = await zygote();
    const k = await sh(`kill -9 ${z}; echo killed`);
    expect(k.stdout).toBe('killed\n');
    expect((await sh('echo next')).stdout).toBe('next\n');
    let now = '';
    for (let i = 0; i < 50 && (now === '' || now === z); i++) now = await zygote();
    expect(now).toMatch(/^\d+$/);
    expect(now).not.toBe(z);
  });

  it('a zygote stopped from inside, or the waiting process killed, does not hold an exec up', async () => {
    const z = await zygote();
    expect((await sh(`kill -STOP ${z}; echo stopped`)).stdout).toBe('stopped\n');
    // The session waits a few seconds for the stopped zygote, then gives the command a session of its own.
    const started = Date.now();
    expect((await sh('echo despite')).stdout).toBe('despite\n');
    expect(Date.now() - started).toBeLessThan(10_000);
    // The process waiting for the next command, killed between two commands by a background one.
    const bg = await runtime.startBackground(id, 'sleep 0.3; pkill -9 -x nube-sh-wait; echo done');
    for (let i = 0; i < 100 && (await runtime.getBackground(id, bg)).state === 'running'; i++) await new Promise((r) => setTimeout(r, 20));
    expect((await runtime.getBackground(id, bg)).stdout).toBe('done\n');
    expect((await sh('echo still')).stdout).toBe('still\n');
    expect((await sh('echo and again')).stdout).toBe('and again\n');
  }, 30_000);

  // Last: from here on the sandbox has two resident sessions.
  it('a long command keeps its resident session busy; the execs beside it get another one', async () => {
    const out: string[] = [];
    const long = runtime.execStream(id, ['/bin/sh', '-c', 'sleep 4; echo long'], {}, { stdout: (c) => out.push(c.toString()), stderr: () => {} });
    // This one runs in a session of its own while a second resident session is made.
    expect((await sh('echo beside')).stdout).toBe('beside\n');
    let zygotes = '';
    for (const end = Date.now() + 10_000; zygotes !== '2' && Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
      zygotes = (await sh('pgrep -xc nube-zygote || true')).stdout.trim();
    }
    expect(zygotes).toBe('2');
    expect((await long).exitCode).toBe(0);
    expect(out.join('')).toBe('long\n');
  });
});
