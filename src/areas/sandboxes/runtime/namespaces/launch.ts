import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
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
  const points = new Set(
    (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map((l) => l.split(' ')[4]),
  );
  return paths.filter((p) => points.has(p));
}

export async function isMounted(path: string): Promise<boolean> {
  return (await mounted([path])).length > 0;
}

/**
 * Upper/work dirs owned by root-inside and the per-sandbox /etc files; returns the launch request's
 * overlay fields (helper/launch.c mounts it), none when it is mounted already.
 */
export async function prepareRootfs(ctx: LaunchContext, rec: SandboxRecord): Promise<string[]> {
  const p = ctx.layout.sandbox(rec.id);
  // A new sandbox has no mount point yet: the mount table (long on a busy host) is read only on a resume.
  if (existsSync(p.merged) && (await isMounted(p.merged))) return [];
  const uid = ctx.uidBase;
  // Synchronous: ten small operations of a few microseconds each, where a thread-pool round trip
  // apiece (even in parallel) cost milliseconds on a busy host.
  for (const d of [`${p.upper}/etc`, p.work, p.merged]) mkdirSync(d, { recursive: true });
  // No reachable resolver means no nameserver line: lookups then fail at once instead of stalling.
  // One retry after 2 s: a single lost or late UDP answer (seen under load inside gVisor) is not a
  // failed lookup; glibc's own default waits 5 s twice.
  const resolv = ctx.resolver
    ? `nameserver ${ctx.resolver}\noptions timeout:2 attempts:2\n`
    : 'options timeout:1\n';
  // The mount point's directory: the sandbox's uid (bwrap, runsc) may enter it, other host users not.
  chmodSync(p.run, 0o700);
  for (const d of [p.run, p.upper, `${p.upper}/etc`]) chownSync(d, uid, uid);
  const files: [string, string][] = [
    ['resolv.conf', resolv],
    ['hostname', `${rec.id}\n`],
    ['hosts', `127.0.0.1\tlocalhost\n127.0.1.1\t${rec.id}\n`],
  ];
  for (const [name, text] of files) {
    writeFileSync(`${p.upper}/etc/${name}`, text);
    chownSync(`${p.upper}/etc/${name}`, uid, uid);
  }
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
  mountPoints(rec, p.upper, uid);
  const binds = (rec.mounts ?? []).map(
    (m) => `B:${m.readOnly ? 'r' : 'w'}\t${m.source}\t${p.merged}${m.target}`,
  );
  return [`M:${p.merged}`, `o:${opts}`, ...binds];
}

/**
 * Each volume's mount point as a directory in the upper dir, before the overlay is mounted (the
 * sandbox is not running: nothing changes the layers meanwhile). A path the layers make a symlink or
 * a file anywhere on the way is refused: the helper binds on the host, where a symlink would lead out
 * of the sandbox. A directory only a lower layer has is made in the upper one with its owner and mode.
 */
function mountPoints(rec: SandboxRecord, upper: string, uid: number): void {
  const layers = [upper, ...rec.lowerDirs];
  for (const m of rec.mounts ?? []) {
    let rel = '';
    for (const part of m.target.split('/').filter(Boolean)) {
      rel += `/${part}`;
      let found: import('node:fs').Stats | null = null;
      for (const layer of layers) {
        found = lstatSync(`${layer}${rel}`, { throwIfNoEntry: false }) ?? null;
        if (found) break;
      }
      if (found && !found.isDirectory())
        throw new SandboxRuntimeError(
          'InvalidInput',
          `volume mount path ${m.target}: ${rel} is not a directory in the sandbox`,
        );
      if (existsSync(`${upper}${rel}`)) continue;
      mkdirSync(`${upper}${rel}`, { mode: found ? found.mode & 0o7777 : 0o755 });
      chownSync(`${upper}${rel}`, found?.uid ?? uid, found?.gid ?? uid);
    }
  }
}

export async function unmountRootfs(ctx: LaunchContext, id: string): Promise<void> {
  const p = ctx.layout.sandbox(id);
  for (const merged of await mounted([p.merged, p.legacyMerged])) {
    const res = await run('umount', [merged], { allowFailure: true });
    if (res.code !== 0) await run('umount', ['-l', merged]);
  }
}

/**
 * The launch request's init fields: it joins the cgroups, enters the netns, gets a user namespace with
 * the uid range mapped (written by the helper: no unshare, newuidmap, newgidmap), and bwrap pivots
 * into the overlay with fresh pid/mount/ipc/uts namespaces and the seccomp filter (fd 3). Detached, so
 * it outlives nube; the helper answers when pid 1 inside has started its child (setup finished).
 */
export function initFields(ctx: LaunchContext, rec: SandboxRecord, cgroupDirs: string[]): string[] {
  const p = ctx.layout.sandbox(rec.id);
  const argv = [
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
    // Imported templates (any image) carry nube's own waiting process; nube's templates have sleep.
    ...(existsSync(`${rec.lowerDirs.at(-1)}/.nube/pause`) ? ['/.nube/pause'] : ['/bin/sleep', 'infinity']),
  ];
  return [
    ...cgroupDirs.map((d) => `c:${d}`),
    `u:0 ${ctx.uidBase} ${ctx.uidCount}`,
    `l:${p.initLog}`,
    `s:${ctx.seccompBpf}`,
    ...argv.map((a) => `a:${a}`),
  ];
}

/** The helper's answer to a launch with an init: "init PID INNER-PID START-TIME". */
export function parseInit(answer: string, id: string): NonNullable<SandboxRecord['init']> {
  const m = /^init (\d+) (\d+) (\d+)$/m.exec(answer);
  if (!m)
    throw new SandboxRuntimeError('Internal', `sandbox ${id} init failed: ${answer.trim().slice(-1000)}`);
  return { pid: Number(m[1]), innerPid: Number(m[2]), startTime: m[3]! };
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
