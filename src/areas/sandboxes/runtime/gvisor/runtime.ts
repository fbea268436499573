import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, readFile, writeFile } from 'node:fs/promises';
import type { ExecOptions, ExecResult, OutputSinks, StreamExecOptions, StreamExecResult } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { files as bgFiles, launchDetached } from '../namespaces/background.js';
import { sandboxEnv, toExecResult } from '../namespaces/exec.js';
import { unmountRootfs } from '../namespaces/launch.js';
import { run } from '../namespaces/proc.js';
import { NamespacesRuntime, type NamespacesRuntimeOptions } from '../namespaces/runtime.js';
import { processStartTime, type SandboxRecord, saveRecord } from '../namespaces/state.js';
import { AgentChannel, type AgentRequest, encodeRequest, runOnWorker } from './agent.js';
import { NUBE_RUN, Runsc, type RunscTarget, ensureNubeRun, ensureStaticSh, ociSpec, runscBuild } from './runsc.js';

export interface GvisorRuntimeOptions extends NamespacesRuntimeOptions {
  /** runsc platform: `ptrace` works everywhere; `kvm` needs usable /dev/kvm. */
  platform?: string;
}

const MAX_FILE_BYTES = 256 * 1024 * 1024;

/** A command that ended without its own exit status: 137, and why in stderr. */
function cutShort(why: string) {
  return { stdout: Buffer.alloc(0), stderr: Buffer.from(why), exitCode: 137, durationMs: 0, timedOut: false, truncated: false };
}

// Debian bookworm's gVisor (20221219; see oldRunsc) walks `<symlink to />/root` to `/` (a path bug;
// still inside the sandbox). Under that runsc, for the files API every absolute path argument gets its
// directory resolved by `realpath -m` (which walks symlinks one component at a time, which gVisor gets
// right) and keeps its last component as given, so a symlink itself can still be deleted or moved.
// $1 is the files script, $2 the operation.
const CANONICAL_DIRS = `s=$1; op=$2; shift 2; n=$#
for a; do
  case $a in /?*) d=$(realpath -m -- "$(dirname -- "$a")") || exit 1; a="\${d%/}/$(basename -- "$a")";; esac
  set -- "$@" "$a"
done
shift $n
exec /bin/sh -c "$s" nube-files "$op" "$@"`;

/**
 * The same sandboxes on gVisor: a user-space kernel (runsc, the sentry) runs the workload, so its
 * system calls never reach the host kernel. Everything but the process layer is the namespaces
 * driver's: templates, overlay per sandbox, state files, address leases, bridge + veth + nftables
 * (runsc runs inside the sandbox's netns with `--network=host`), snapshots, forks, re-adoption.
 */
export class GvisorRuntime extends NamespacesRuntime {
  override readonly kind: string = 'gvisor';
  /**
   * No: the sentry sees only what the gofer was given at start (its OCI mounts); runsc adds no mount
   * to a running sandbox, and a bind on the host under its rootfs would not reach it. A create with
   * volumes starts its own sandbox.
   */
  override readonly claimsMounts: boolean = false;
  private runsc!: Runsc;
  private binDir = '';
  /** /.nube holds the static sh (scripts/install-static-sh.sh): the agent runs `sh -c` with it. */
  private staticSh = false;
  private gvReady: Promise<void> | null = null;
  private readonly restarts = new Map<string, Promise<SandboxRecord>>();
  /** Per running sandbox (keyed by id and sentry pid): the host end of its exec agent. */
  private readonly agents = new Map<string, { pid: number; channel: Promise<AgentChannel> }>();

  constructor(private readonly gvOpts: GvisorRuntimeOptions) {
    super(gvOpts);
  }

  protected override ready(): Promise<void> {
    this.gvReady ??= (async () => {
      await super.ready();
      const has = await run('runsc', ['--version'], { allowFailure: true }).catch(() => null);
      if (has?.code !== 0) {
        throw new SandboxRuntimeError('HostUnsupported', 'runsc (gVisor) is not installed: apt-get install runsc');
      }
      this.runsc = new Runsc(this.gvOpts.platform ?? 'ptrace', this.ctx.uidBase, this.ctx.uidCount, runscBuild(has.stdout));
      this.binDir = await ensureNubeRun(this.layout.runRoot);
      this.staticSh = await ensureStaticSh(this.binDir);
    })();
    this.gvReady.catch(() => {
      this.gvReady = null;
    });
    return this.gvReady;
  }

  /** In the run dir: runsc, in the sandbox's user namespace, opens it by path (see Layout). */
  private bundle(id: string): string {
    return `${this.layout.sandbox(id).run}/bundle`;
  }

  private agentDir(id: string): string {
    return `${this.layout.sandbox(id).run}/agent`;
  }

  /**
   * The agent channel of a running sandbox. One launched by this process listens before its sentry
   * starts; one found running (nube restarted) gets a channel on first use, and its agent's workers
   * reconnect within their backoff (until then commands go the `runsc exec` way).
   */
  private agent(rec: SandboxRecord): Promise<AgentChannel> | null {
    const pid = rec.init?.pid;
    if (!pid) return null;
    const have = this.agents.get(rec.id);
    if (have?.pid === pid) return have.channel;
    this.closeAgent(rec.id);
    const channel = AgentChannel.listen(this.agentDir(rec.id), this.ctx.uidBase, false);
    channel.catch(() => this.agents.delete(rec.id));
    this.agents.set(rec.id, { pid, channel });
    return channel;
  }

  private closeAgent(id: string): void {
    const have = this.agents.get(id);
    this.agents.delete(id);
    have?.channel.then((c) => c.close(), () => {});
  }

  private target(rec: SandboxRecord): RunscTarget {
    // One runsc state dir per sandbox: runsc matches ids by prefix (`a` would be ambiguous with `a-b`).
    return { id: rec.id, root: `${this.bundle(rec.id)}/state`, netns: this.netns(rec.id), pid: rec.init?.pid ?? null };
  }

  // The sentry and gofer are charged with the workload (a little headroom), and the ptrace platform
  // uses several host threads per guest process, so the host pids cap is generous: past it the
  // sentry cannot create threads and the whole sandbox ends (gVisor has no pids controller here).
  protected override applyLimits(rec: SandboxRecord): Promise<void> {
    const l = rec.limits;
    return this.cg(rec.id).create({ ...l, memoryMb: l.memoryMb + 64, pids: Math.max(2048, l.pids * 16) });
  }

  protected override async launch(rec: SandboxRecord): Promise<void> {
    const p = this.layout.sandbox(rec.id);
    const cg = this.cg(rec.id);
    const bundle = this.bundle(rec.id);
    await Promise.all([this.startOnHost(rec, []), mkdir(`${bundle}/state`, { recursive: true })]);
    // The agent's socket listens before the sentry starts, so its first worker finds it.
    this.closeAgent(rec.id);
    const channel = await AgentChannel.listen(this.agentDir(rec.id), this.ctx.uidBase, true);
    const spec = ociSpec({ id: rec.id, rootfs: p.merged, runDir: this.binDir, agentDir: this.agentDir(rec.id), env: sandboxEnv(rec), staticSh: this.staticSh, volumes: rec.mounts });
    // The env may carry credentials: readable by the sandbox's uid (runsc runs as it) and root only.
    await writeFile(`${bundle}/config.json`, JSON.stringify(spec), { mode: 0o600 });
    const own = [bundle, `${bundle}/state`, `${bundle}/config.json`];
    await Promise.all(own.map((d) => chown(d, this.ctx.uidBase, this.ctx.uidBase)));
    await this.runsc.remove({ ...this.target(rec), pid: null });
    const pid = await this.runsc
      .start({ helper: this.ctx.helper, runDir: this.binDir, cgroupDirs: cg.dirs(), target: this.target(rec), bundle, log: p.initLog })
      .catch((e) => {
        channel.close();
        throw e;
      });
    this.agents.set(rec.id, { pid, channel: Promise.resolve(channel) });
    const startTime = await processStartTime(pid);
    if (!startTime) throw new SandboxRuntimeError('Internal', `sandbox ${rec.id} exited at start`);
    rec.init = { pid, innerPid: pid, startTime };
    rec.state = 'running';
    await saveRecord(this.layout, rec);
  }

  /**
   * A sandbox whose sentry died (a fork bomb or memory hog past the host cgroup's caps ends the whole
   * gVisor sandbox) is started again on its files by the next call, as `recover()` does after a reboot.
   * Not under the per-id lock (callers may hold it already); concurrent callers share one restart.
   */
  protected override async running(id: string): Promise<SandboxRecord> {
    const rec = await super.running(id);
    if (await this.alive(rec)) return rec;
    let restart = this.restarts.get(id);
    if (!restart) {
      restart = (async () => {
        await this.halt(rec);
        await this.launch(rec);
        return rec;
      })().finally(() => this.restarts.delete(id));
      this.restarts.set(id, restart);
    }
    return restart;
  }

  /** Whether the sentry is still there after up to `ms` (it takes a moment to go after a crash). */
  private async aliveAfter(rec: SandboxRecord, ms: number): Promise<boolean> {
    for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
      if (!(await this.alive(rec))) return false;
    }
    return this.alive(rec);
  }

  private async alive(rec: SandboxRecord): Promise<boolean> {
    return rec.init !== null && (await processStartTime(rec.init.pid)) === rec.init.startTime;
  }

  /** SIGKILL to everything in the sandbox's cgroups (sentry, gofer) is quicker than `runsc delete`. */
  protected override async halt(rec: SandboxRecord): Promise<void> {
    if (rec.frozen) await this.pauser(rec).thaw();
    rec.frozen = false;
    this.closeAgent(rec.id);
    await this.cg(rec.id).destroy();
    await this.runsc.remove({ ...this.target(rec), pid: null });
    await this.network.detach(this.netns(rec.id), rec.leaseIdx);
    await unmountRootfs(this.ctx, rec.id);
    rec.init = null;
  }

  /** Run argv inside: on a worker of the sandbox's agent, or by `runsc exec` when none comes. */
  private async inside(rec: SandboxRecord, argv: string[], o: Omit<AgentRequest, 'argv' | 'env'> & { env?: Record<string, string> }) {
    const req: AgentRequest = { ...o, argv, env: { ...this.runsc.env, ...sandboxEnv(rec, o.env) } };
    const payload = encodeRequest(req);
    const channel = payload ? await this.agent(rec)?.catch(() => null) : null;
    const worker = channel ? await channel.take() : null;
    const r = worker && payload ? await runOnWorker(worker, payload, req) : await this.viaRunsc(rec, req);
    if (r) return r;
    // The worker ended without an exit status: the sandbox ended, or root inside killed the agent.
    if (!(await this.aliveAfter(rec, 1000))) return this.ended();
    return cutShort('nube: the sandbox\'s exec agent ended during this command (later commands start by runsc exec)\n');
  }

  private ended() {
    return cutShort('nube: the sandbox ended during this command (gVisor: past its memory or pids limit); its files are kept and the next call starts it again\n');
  }

  /** The fallback: one `runsc exec` of nube-run per command (output handed over at the end). */
  private async viaRunsc(rec: SandboxRecord, o: AgentRequest) {
    const r = await this.runsc.exec(this.target(rec), this.bundle(rec.id), o.argv, o);
    // runsc answers 128 when it lost the sandbox: say what happened instead of runsc's RPC error.
    const lost = r.exitCode === 128 && r.stderr.toString().includes(`sandbox "${rec.id}"`);
    if (lost && !(await this.aliveAfter(rec, 1000))) return { ...this.ended(), durationMs: r.durationMs };
    if (o.sinks) {
      if (r.stdout.length) o.sinks.stdout(r.stdout);
      if (r.stderr.length) o.sinks.stderr(r.stderr);
      return { ...r, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    }
    return r;
  }

  protected override enter(rec: SandboxRecord, cwd = '/') {
    return (argv: string[], stdin?: Uint8Array | string) => {
      // The files script: under an old runsc its absolute path arguments get their directory canonicalized first.
      const args = argv[3] === 'nube-files' && this.runsc.old ? ['/bin/sh', '-c', CANONICAL_DIRS, 'nube-files', argv[2], ...argv.slice(4)] : argv;
      return this.inside(rec, args, { cwd, stdin, timeoutMs: 120_000, maxOutputBytes: MAX_FILE_BYTES });
    };
  }

  /**
   * Output streams as it comes on the agent; the `runsc exec` fallback hands it over when the command
   * ends, and sees an abort only then (the deadline still holds).
   */
  override async execStream(id: string, argv: string[], o: StreamExecOptions, sinks: OutputSinks): Promise<StreamExecResult> {
    const rec = await this.running(id);
    const r = await this.inside(rec, argv, {
      cwd: o.cwd ?? '/root',
      env: o.env,
      stdin: o.stdin,
      timeoutMs: o.timeoutMs ?? 60_000,
      maxOutputBytes: this.opts.maxOutputBytes ?? 1024 * 1024,
      sinks,
      signal: o.signal,
    });
    return { exitCode: r.exitCode, durationMs: r.durationMs, timedOut: r.timedOut };
  }

  override async exec(id: string, command: string, o: ExecOptions = {}): Promise<ExecResult> {
    const rec = await this.running(id);
    const r = await this.inside(rec, ['/bin/sh', '-c', command], {
      ...o,
      cwd: o.cwd ?? '/root',
      timeoutMs: o.timeoutMs ?? 60_000,
      maxOutputBytes: o.maxOutputBytes ?? this.opts.maxOutputBytes ?? 1024 * 1024,
    });
    return toExecResult(r);
  }

  /**
   * A detached host shell runs `runsc exec` (which lasts as long as the command) and writes the exit
   * status to a file when it ends, so state, exit code and logs survive a restart of nube.
   */
  override async startBackground(id: string, command: string, o: { cwd?: string; env?: Record<string, string> } = {}) {
    const rec = await this.running(id);
    const execId = `bg_${randomBytes(8).toString('hex')}`;
    const f = bgFiles(this.layout.sandbox(id).bg, execId);
    await mkdir(f.dir, { recursive: true });
    // runsc reads the process file and writes the pid file by path from the sandbox's user namespace:
    // both in the bundle (run dir), not in the data dir, which that uid may not be able to enter.
    const bundle = this.bundle(id);
    const proc = await this.runsc.writeProcess(bundle, [NUBE_RUN, '0', '/bin/sh', '-c', command], { ...this.runsc.env, ...sandboxEnv(rec, o.env) }, o.cwd ?? '/root');
    const pidFile = this.bgPidFile(id, execId);
    const [cmd, argv] = this.runsc.argv(this.target(rec), ['exec', `--process=${proc}`, `--internal-pid-file=${pidFile}`, id]);
    const script = '"$@"; echo "exit $?" > "$NUBE_STATUS.tmp"; mv "$NUBE_STATUS.tmp" "$NUBE_STATUS"; rm -f "$NUBE_PROC"';
    await launchDetached(
      f,
      command,
      '/bin/sh',
      ['-c', script, 'nube-bg', cmd, ...argv],
      { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', NUBE_STATUS: f.status, NUBE_PROC: proc },
      pidFile,
    );
    return execId;
  }

  private bgPidFile(id: string, execId: string): string {
    return `${this.bundle(id)}/${execId}.pid`;
  }

  /** SIGTERM through nube-run to the command's group; after the grace, SIGUSR1 = SIGKILL everything. */
  override async killBackground(id: string, execId: string, graceSeconds = 5): Promise<void> {
    const rec = await this.record(id);
    const detail = await this.getBackground(id, execId, { maxBytes: 0 });
    if (detail.state === 'exited') return;
    const f = bgFiles(this.layout.sandbox(id).bg, execId);
    const pid = Number((await readFile(this.bgPidFile(id, execId), 'utf8').catch(() => '0')).trim());
    if (!pid) return;
    const signal = (sig: string) => this.runsc.call(this.target(rec), ['kill', `--pid=${pid}`, rec.id, sig], true);
    await signal('TERM');
    const deadline = Date.now() + Math.min(30, Math.max(0, graceSeconds)) * 1000;
    while (Date.now() < deadline && !existsSync(f.status)) await new Promise((r) => setTimeout(r, 20));
    if (!existsSync(f.status)) await signal('USR1');
    for (let i = 0; i < 250 && !existsSync(f.status); i++) await new Promise((r) => setTimeout(r, 8));
  }

  /** Closing drops the agents' connections: their workers reconnect to the next nube. */
  override async close(): Promise<void> {
    for (const id of [...this.agents.keys()]) this.closeAgent(id);
    await super.close();
  }

  /** `runsc pause` stops the sentry's tasks as the freezer cgroup does (snapshots, suspend with memory). */
  protected override pauser(rec: SandboxRecord) {
    const t = this.target(rec);
    return {
      freeze: async () => void (await this.runsc.call(t, ['pause', rec.id])),
      thaw: async () => void (await this.runsc.call(t, ['resume', rec.id], true)),
    };
  }
}
