import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { chmod, chown, copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { SandboxRuntimeError } from '../driver.js';
import { Capture, type RawResult } from '../namespaces/exec.js';
import { type RunResult, run } from '../namespaces/proc.js';
import { STATIC_SH_DIR } from '../static-sh.js';
import { AGENT_DIR_INSIDE, AGENT_SOCKET_INSIDE } from './agent.js';

/** Where nube-run (the in-sandbox exec wrapper) is mounted inside every gVisor sandbox. */
export const NUBE_RUN = '/.nube/nube-run';
/** The sandbox's init and exec agent (nube-agent.c). */
const NUBE_AGENT = '/.nube/nube-agent';
// The static sh (../static-sh.ts) and its reference dash are copied into /.nube when installed.
const STATIC_SH = ['/.nube/sh', '/.nube/dash.ref'];
/** Exit code nube-run answers when the deadline killed the command. */
const TIMEOUT_CODE = 124;

// Root inside holds the capabilities a Docker container's root has; gVisor implements them inside
// its own kernel, none of them reach the host.
const CAPS = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
  'CAP_SYS_PTRACE',
];

/** The `process` of an OCI spec: root inside, nube-run in front of every command but the init. */
export function ociProcess(argv: string[], env: Record<string, string>, cwd: string) {
  return {
    user: { uid: 0, gid: 0 },
    args: argv,
    env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    cwd,
    capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS, inheritable: CAPS },
    rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1048576, soft: 1048576 }],
  };
}

/**
 * OCI bundle config: the overlay as root, fresh pid/ipc/uts/mount namespaces, nube-run mounted, the
 * exec agent as init (told of the static sh when /.nube has it), its socket's dir (on the host)
 * read-only at /.nube-agent.
 */
export function ociSpec(o: {
  id: string;
  rootfs: string;
  runDir: string;
  agentDir: string;
  env: Record<string, string>;
  staticSh: boolean;
  /** Volumes, already bound on the host at rootfs + target: served to the sentry by the gofer as mounts of their own. */
  volumes?: { target: string; readOnly: boolean }[];
}) {
  return {
    ociVersion: '1.0.2',
    process: ociProcess([NUBE_AGENT, AGENT_SOCKET_INSIDE, ...(o.staticSh ? STATIC_SH : [])], o.env, '/'),
    root: { path: o.rootfs, readonly: false },
    hostname: o.id,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/.nube', type: 'bind', source: o.runDir, options: ['rbind', 'ro'] },
      { destination: AGENT_DIR_INSIDE, type: 'bind', source: o.agentDir, options: ['rbind', 'ro'] },
      ...(o.volumes ?? []).map((v) => ({
        destination: v.target,
        type: 'bind',
        source: `${o.rootfs}${v.target}`,
        options: ['rbind', 'nosuid', 'nodev', v.readOnly ? 'ro' : 'rw'],
      })),
    ],
    linux: { namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }] },
  };
}

function sourcePath(name: string): string {
  const here = fileURLToPath(new URL(`./${name}`, import.meta.url));
  const fromDist = here.replace(`${'/dist/'}src/`, '/src/');
  for (const p of [here, fromDist]) if (existsSync(p)) return p;
  throw new Error(`${name} not found near ${here}`);
}

/** The build date (yyyymmdd) in `runsc --version`'s answer ("runsc version 0.0~20240729.0"); 0 when it says none. */
export function runscBuild(version: string): number {
  const m = /(20\d{6})/.exec(version);
  return m ? Number(m[1]) : 0;
}

/**
 * Whether this is Debian bookworm's runsc (20221219) or as old, with two quirks nube works around:
 * statx with AT_NO_AUTOMOUNT answers EINVAL, and `<symlink to />/root` walks to `/`. Later ones
 * (bookworm-backports: 20240729) have neither. An undated build is taken as recent.
 */
export function oldRunsc(build: number): boolean {
  return build > 0 && build < 20240101;
}

/**
 * The environment every command inside starts from (the caller's env may override it): statx-fix.so
 * preloaded under an old runsc only (elsewhere it would cost every command a library load, about 1 ms
 * on the ptrace platform).
 */
export function gvisorEnv(build: number): Record<string, string> {
  return oldRunsc(build) ? { LD_PRELOAD: '/.nube/statx-fix.so' } : {};
}

/**
 * Compile what is mounted at /.nube once per source version: nube-agent, runas and nube-run (static: they
 * need nothing from the sandbox's own libraries; nube-run last, its presence marks the dir complete)
 * and statx-fix.so (preloaded into commands; see its source). Under the
 * run root, not the data dir: runsc's gofer opens it by path from the sandbox's user namespace.
 */
export async function ensureNubeRun(runRoot: string): Promise<string> {
  const sources = ['nube-run.c', 'statx-fix.c', 'nube-agent.c', 'nube-procs.h', '../static-sh-wait.h', '../runas.c'].map(sourcePath);
  const hash = createHash('sha256');
  for (const src of sources) hash.update(await readFile(src));
  // Another static sh version is another dir (ensureStaticSh copies into it once).
  hash.update(STATIC_SH_DIR);
  const dir = `${runRoot}/bin/gvisor-${hash.digest('hex').slice(0, 12)}`;
  if (existsSync(`${dir}/nube-run`)) return dir;
  await mkdir(dir, { recursive: true });
  await Promise.all([chmod(`${runRoot}/bin`, 0o755), chmod(dir, 0o755)]);
  const gcc = (flags: string[], src: string) => (tmp: string) => run('gcc', ['-O2', '-Wall', ...flags, '-o', tmp, src]);
  await placeFile(dir, 'statx-fix.so', 0o755, gcc(['-shared', '-fPIC'], sources[1]!));
  await placeFile(dir, 'nube-agent', 0o755, gcc(['-static'], sources[2]!));
  // Commands as a template's user (../runas.c); every gVisor sandbox has it, nube's templates too.
  await placeFile(dir, 'runas', 0o755, gcc(['-static'], sources[5]!));
  await placeFile(dir, 'nube-run', 0o755, gcc(['-static'], sources[0]!));
  return dir;
}

/** Puts `dir/name` in place whole: `make` writes a temporary file, which gets `mode` and is renamed. */
async function placeFile(dir: string, name: string, mode: number, make: (tmp: string) => Promise<unknown>): Promise<void> {
  const tmp = `${dir}/${process.pid}.tmp`;
  await make(tmp);
  await chmod(tmp, mode);
  await rename(tmp, `${dir}/${name}`);
}

/**
 * Copies the static sh and its reference into `dir` (the /.nube of every sandbox) once it is installed
 * (scripts/install-static-sh.sh); whether /.nube has them. Installed later, it is picked up by the next
 * nube start.
 */
export async function ensureStaticSh(dir: string, from = STATIC_SH_DIR): Promise<boolean> {
  if (existsSync(`${dir}/sh`)) return true;
  if (!existsSync(`${from}/sh`) || !existsSync(`${from}/dash.ref`)) return false;
  await placeFile(dir, 'dash.ref', 0o644, (tmp) => copyFile(`${from}/dash.ref`, tmp));
  await placeFile(dir, 'sh', 0o755, (tmp) => copyFile(`${from}/sh`, tmp));
  return true;
}

/** Where a sandbox's runsc processes live: its netns, and (once started) its sentry's user namespace. */
export interface RunscTarget {
  id: string;
  /** runsc's state dir for this sandbox. */
  root: string;
  netns: string;
  /** Host pid of the sandbox (sentry) process; null before it starts. */
  pid: number | null;
}

/**
 * Every runsc call. runsc runs in the sandbox's netns (its control socket is an abstract unix socket,
 * scoped by netns; `--network=host` makes the sentry use that netns, which nube's veth, bridge and
 * nftables already police) and in a user namespace mapping root to `uidBase` (the sentry, the gofer
 * and every file they create belong to an unprivileged uid outside; the control socket only answers
 * callers from that namespace). runsc cannot write host cgroups from there (`--ignore-cgroups`): nube
 * puts it into the sandbox's cgroups before it starts. `--host-uds=open` lets the sandbox connect to
 * host unix sockets in its mounts (never create one): the one nube put at /.nube-agent for the agent
 * (the overlay's files are made through the gofer, which then makes no host sockets).
 * `--overlay2=none`: since 2023 runsc wraps the root in an overlay of its own by default (root:self),
 * which would keep the sandbox's writes out of nube's upper dir (snapshots, forks and resumes read it).
 */
export class Runsc {
  /** See gvisorEnv. */
  readonly env: Record<string, string>;
  /** See oldRunsc. */
  readonly old: boolean;

  constructor(
    private readonly platform: string,
    private readonly uidBase: number,
    private readonly uidCount: number,
    build: number,
  ) {
    this.env = gvisorEnv(build);
    this.old = oldRunsc(build);
  }

  argv(t: RunscTarget, args: string[]): [string, string[]] {
    const runsc = ['runsc', `--root=${t.root}`, '--ignore-cgroups', `--platform=${this.platform}`, '--network=host', '--host-uds=open', '--overlay2=none', ...args];
    const net = existsSync(`/run/netns/${t.netns}`) ? [`--net=/run/netns/${t.netns}`] : [];
    if (t.pid) return ['nsenter', [...net, `--user=/proc/${t.pid}/ns/user`, ...runsc]];
    const map = `${this.uidBase},0,${this.uidCount}`;
    const userns = ['--user', `--map-users=${map}`, `--map-groups=${map}`, '--setuid', '0', '--setgid', '0', '--', ...runsc];
    return net.length ? ['nsenter', [...net, 'unshare', ...userns]] : ['unshare', userns];
  }

  call(t: RunscTarget, args: string[], allowFailure = false): Promise<RunResult> {
    const [cmd, argv] = this.argv(t, args);
    return run(cmd, argv, { allowFailure });
  }

  /**
   * `runsc run --detach` through `nube-helper cg` (joins the cgroups first), under `nube-run keep`,
   * which stays the sandbox processes' parent so that they are reaped the moment they die. runsc's
   * stdio is inherited by the sandbox, so it goes to a log file. Returns the sandbox's host pid.
   */
  async start(o: { helper: string; runDir: string; cgroupDirs: string[]; target: RunscTarget; bundle: string; log: string }) {
    const pidFile = `${o.bundle}/sandbox.pid`;
    const status = `${o.bundle}/run.status`;
    await Promise.all([rm(pidFile, { force: true }), rm(status, { force: true })]);
    const fd = openSync(o.log, 'a');
    const [cmd, argv] = this.argv({ ...o.target, pid: null }, ['run', '--detach', `--bundle=${o.bundle}`, `--pid-file=${pidFile}`, o.target.id]);
    const args = ['keep', status, o.helper, 'cg', ...o.cgroupDirs, '--', cmd, ...argv];
    const child = spawn(`${o.runDir}/nube-run`, args, { detached: true, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    child.unref();
    let exited = false;
    child.on('exit', () => {
      exited = true;
    });
    for (let i = 0; i < 15_000 && !existsSync(status) && !exited; i++) await new Promise((r) => setTimeout(r, 2));
    const code = existsSync(status) ? Number((await readFile(status, 'utf8')).trim()) : 1;
    if (code !== 0) {
      const why = await readFile(o.log, 'utf8').catch(() => '');
      throw new SandboxRuntimeError('Internal', `runsc run ${o.target.id} failed: ${why.trim().slice(-1000)}`);
    }
    return Number((await readFile(pidFile, 'utf8')).trim());
  }

  /** Forget a sandbox: kill it if it still runs, then drop runsc's state files for it. */
  async remove(t: RunscTarget): Promise<void> {
    if (t.pid) await this.call(t, ['delete', '--force', t.id], true);
    for (const f of await readdir(t.root).catch(() => [] as string[])) await rm(`${t.root}/${f}`, { force: true });
  }

  /** A process spec in a file beside the bundle (env may carry credentials: not on a command line). */
  async writeProcess(dir: string, argv: string[], env: Record<string, string>, cwd: string): Promise<string> {
    const file = `${dir}/exec-${randomBytes(6).toString('hex')}.json`;
    await writeFile(file, JSON.stringify(ociProcess(argv, env, cwd)), { mode: 0o600 });
    await chown(file, this.uidBase, this.uidBase);
    return file;
  }

  /** Run argv inside through nube-run (deadline, process-group and leftover kill) and capture it. */
  async exec(
    t: RunscTarget,
    bundleDir: string,
    argv: string[],
    o: { env: Record<string, string>; cwd: string; timeoutMs?: number; stdin?: string | Uint8Array; maxOutputBytes: number },
  ): Promise<RawResult> {
    const file = await this.writeProcess(bundleDir, [NUBE_RUN, String(o.timeoutMs ?? 0), ...argv], o.env, o.cwd);
    const [cmd, args] = this.argv(t, ['exec', `--process=${file}`, t.id]);
    const out = new Capture(o.maxOutputBytes);
    const err = new Capture(o.maxOutputBytes);
    const started = performance.now();
    try {
      const code = await new Promise<number>((resolve, reject) => {
        const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
        child.stdout.on('data', (c: Buffer) => out.push(c));
        child.stderr.on('data', (c: Buffer) => err.push(c));
        // nube-run enforces the deadline inside; this only guards against a hung runsc client.
        const guard = o.timeoutMs ? setTimeout(() => child.kill('SIGKILL'), o.timeoutMs + 5000) : undefined;
        child.on('error', reject);
        child.on('close', (c, sig) => {
          if (guard) clearTimeout(guard);
          resolve(c ?? 128 + (sig ? 9 : 0));
        });
        child.stdin.on('error', () => {});
        child.stdin.end(o.stdin ?? '');
      });
      const durationMs = Math.round((performance.now() - started) * 100) / 100;
      const timedOut = code === TIMEOUT_CODE && o.timeoutMs !== undefined && durationMs >= o.timeoutMs - 50;
      return {
        stdout: out.buffer,
        stderr: err.buffer,
        exitCode: timedOut ? 137 : code,
        durationMs,
        timedOut,
        truncated: out.truncated || err.truncated,
      };
    } finally {
      await rm(file, { force: true });
    }
  }
}
