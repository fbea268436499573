import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, writeFile } from 'node:fs/promises';
import { SandboxRuntimeError } from '../driver.js';
import { run } from './proc.js';
import type { Layout, SandboxRecord } from './state.js';
import { processStartTime } from './state.js';

export interface LaunchContext {
  layout: Layout;
  helper: string;
  seccompBpf: string;
  uidBase: number;
  uidCount: number;
  resolver: string | null;
}

/** Which of `paths` are mount points (one read of the mount table). */
async function mounted(paths: string[]): Promise<string[]> {
  const points = new Set((await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map((l) => l.split(' ')[4]));
  return paths.filter((p) => points.has(p));
}

export async function isMounted(path: string): Promise<boolean> {
  return (await mounted([path])).length > 0;
}

async function writeOwned(path: string, text: string, uid: number): Promise<void> {
  await writeFile(path, text);
  await chown(path, uid, uid);
}

/** Upper/work dirs owned by root-inside, the per-sandbox /etc files, then the overlay mount. */
export async function mountRootfs(ctx: LaunchContext, rec: SandboxRecord): Promise<void> {
  const p = ctx.layout.sandbox(rec.id);
  if (await isMounted(p.merged)) return;
  const uid = ctx.uidBase;
  // Independent steps in parallel: each is a syscall or two, but awaiting them one by one adds up.
  await Promise.all([mkdir(`${p.upper}/etc`, { recursive: true }), mkdir(p.work, { recursive: true }), mkdir(p.merged, { recursive: true })]);
  // No reachable resolver means no nameserver line: lookups then fail at once instead of stalling.
  const resolv = ctx.resolver ? `nameserver ${ctx.resolver}\noptions timeout:2 attempts:1\n` : 'options timeout:1\n';
  await Promise.all([
    // The mount point's directory: the sandbox's uid (bwrap, runsc) may enter it, other host users not.
    chmod(p.run, 0o700),
    chown(p.run, uid, uid),
    chown(p.upper, uid, uid),
    chown(`${p.upper}/etc`, uid, uid),
    writeOwned(`${p.upper}/etc/resolv.conf`, resolv, uid),
    writeOwned(`${p.upper}/etc/hostname`, `${rec.id}\n`, uid),
    writeOwned(`${p.upper}/etc/hosts`, `127.0.0.1\tlocalhost\n127.0.1.1\t${rec.id}\n`, uid),
  ]);
  // index/metacopy/redirect_dir off: an upper dir must stay a self-contained tree, because a copy of
  // it becomes a lower layer of forks.
  const opts = [
    `lowerdir=${rec.lowerDirs.join(':')}`,
    `upperdir=${p.upper}`,
    `workdir=${p.work}`,
    'index=off',
    'metacopy=off',
    'redirect_dir=off',
    'xino=off',
  ].join(',');
  await run('mount', ['-t', 'overlay', 'overlay', '-o', opts, p.merged]);
}

export async function unmountRootfs(ctx: LaunchContext, id: string): Promise<void> {
  const p = ctx.layout.sandbox(id);
  for (const merged of await mounted([p.merged, p.legacyMerged])) {
    const res = await run('umount', [merged], { allowFailure: true });
    if (res.code !== 0) await run('umount', ['-l', merged]);
  }
}

async function childrenOf(pid: number): Promise<number[]> {
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  return text.split(' ').filter(Boolean).map(Number);
}

/**
 * Start the sandbox's init: joins the cgroups, enters the netns, maps the uid range, and bwrap pivots
 * into the overlay with fresh pid/mount/ipc/uts namespaces and the seccomp filter. It is detached so
 * it outlives this nube process. Returns when pid 1 inside has started its child (setup finished).
 */
export async function startInit(
  ctx: LaunchContext,
  rec: SandboxRecord,
  netns: string,
  cgroupDirs: string[],
): Promise<NonNullable<SandboxRecord['init']>> {
  const p = ctx.layout.sandbox(rec.id);
  const map = `${ctx.uidBase},0,${ctx.uidCount}`;
  const args = [
    'cg',
    ...cgroupDirs,
    '--',
    'nsenter',
    `--net=/run/netns/${netns}`,
    'unshare',
    '--user',
    `--map-users=${map}`,
    `--map-groups=${map}`,
    '--setuid',
    '0',
    '--setgid',
    '0',
    '--',
    'bwrap',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--hostname',
    rec.id,
    '--bind',
    p.merged,
    '/',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--seccomp',
    '3',
    '--new-session',
    '--chdir',
    '/',
    '--',
    '/bin/sleep',
    'infinity',
  ];
  const log = openSync(p.initLog, 'a');
  const bpf = openSync(ctx.seccompBpf, 'r');
  const child = spawn(ctx.helper, args, {
    detached: true,
    stdio: ['ignore', log, log, bpf],
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
  });
  closeSync(log);
  closeSync(bpf);
  child.unref();
  const pid = child.pid;
  if (!pid) throw new SandboxRuntimeError('Internal', 'cannot spawn sandbox init');
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && !exited) {
    for (const inner of await childrenOf(pid)) {
      const comm = await readFile(`/proc/${inner}/comm`, 'utf8').catch(() => '');
      if (comm.trim() !== 'bwrap') continue;
      if ((await childrenOf(inner)).length === 0) continue;
      const startTime = await processStartTime(inner);
      if (startTime) return { pid, innerPid: inner, startTime };
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  const why = await readFile(p.initLog, 'utf8').catch(() => '');
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
  throw new SandboxRuntimeError('Internal', `sandbox ${rec.id} init failed: ${why.trim().slice(-1000)}`);
}

/** Killing pid 1 of the pid namespace kills every process in it. */
export async function stopInit(rec: SandboxRecord): Promise<void> {
  // Only the inner pid is checked against its start time, so a recycled pid is never hit; the outer
  // bwrap exits by itself once its child is gone.
  if (!rec.init || !(await initAlive(rec))) return;
  try {
    process.kill(rec.init.innerPid, 'SIGKILL');
  } catch {
    /* gone */
  }
  for (let i = 0; i < 500 && (await initAlive(rec)); i++) await new Promise((r) => setTimeout(r, 2));
}

export async function initAlive(rec: SandboxRecord): Promise<boolean> {
  if (!rec.init) return false;
  return (await processStartTime(rec.init.innerPid)) === rec.init.startTime;
}
