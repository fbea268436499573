// envd's process service (process.Process) over two ways of running a command in a sandbox: nube's
// streamed exec for a plain command (the fast path: `commands.run`), and the sandbox's helper (the one
// behind nube's terminal and SSH, networking/ssh-helper-script.ts) for one that takes input, with a
// pipe that can be closed (`stdin: true`) or a PTY. Either way a process lives as long as its command:
// the stream that started it may go away (`disconnect`, a background command) and others may attach
// (`Connect`) while it runs. Pids are this adapter's, per sandbox; the table is in memory, so a restart
// of nube ends what it ran this way (nube's own /bg processes are the durable kind).
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { HelperProcess } from '../../areas/sandboxes/networking/ssh-helper-client.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';
import { asUser, type E2bUser, userEnv } from './users.js';

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export type Listener = (msg: unknown) => void;
/** What a process's listeners hear when its sandbox went away under it (their streams drop). */
export const VANISHED = Symbol('vanished');
type Selector = { pid?: number; tag?: string };

/** How a process's start ended: its command ran and ended, or its sandbox went away under it. */
export type Outcome = { timedOut: boolean } | { vanished: true };

interface Proc {
  pid: number;
  tag?: string;
  config: ProcessConfig;
  listeners: Set<Listener>;
  /** Killing (SIGKILL and SIGTERM alike end it): an exec is aborted, a helper process signalled. */
  signal(sig: number): void;
  /** A helper process: input, end of input, window size. */
  helper?: HelperProcess;
  pty: boolean;
}

/** One start under way: who asks, the process, where its events go. */
interface Run {
  p: Principal;
  id: string;
  proc: Proc;
  req: StartRequest;
  env: Record<string, string>;
  cwd: string;
  started: () => void;
  emit: Listener;
}

export interface StartRequest {
  process: ProcessConfig;
  tag?: string;
  stdin: boolean;
  pty?: { rows: number; cols: number };
  timeoutMs?: number;
  user: E2bUser;
}

/** How long a command's failure waits to see whether its sandbox is going away. */
const VANISH_WAIT_MS = 3000;

const SIGNAL_NAMES: Record<number, string> = { 1: 'hangup', 2: 'interrupt', 9: 'killed', 15: 'terminated' };

/** envd's end event: an exit status, or the signal that ended the process. */
function endEvent(r: { code: number; signal?: number }) {
  if (r.signal !== undefined) {
    const status = `signal: ${SIGNAL_NAMES[r.signal] ?? `signal ${r.signal}`}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  return { exitCode: r.code, exited: true, status: `exit status ${r.code}`, ...(r.code !== 0 ? { error: `exit status ${r.code}` } : {}) };
}

export class Processes {
  private readonly bySandbox = new Map<string, Map<number, Proc>>();
  private nextPid = 1000;

  constructor(private readonly sandboxes: SandboxesService) {}

  find(id: string, selector: Selector | undefined): Proc {
    const t = this.bySandbox.get(id);
    const proc =
      selector?.pid !== undefined
        ? t?.get(Number(selector.pid))
        : [...(t?.values() ?? [])].find((x) => selector?.tag !== undefined && x.tag === selector.tag);
    if (!proc) throw new ConnectError('not_found', `process ${selector?.pid ?? selector?.tag ?? ''} not found`);
    return proc;
  }

  list(id: string) {
    return [...(this.bySandbox.get(id)?.values() ?? [])].map((x) => ({ config: x.config, pid: x.pid, ...(x.tag ? { tag: x.tag } : {}) }));
  }

  /**
   * Whether the sandbox is still there and running (a command that failed may have lost it). A kill
   * stops the processes before the record goes, so a running one is asked again for a while.
   */
  private async alive(p: Principal, id: string, patience = VANISH_WAIT_MS): Promise<boolean> {
    const until = Date.now() + patience;
    for (;;) {
      const running = await this.sandboxes.get(p, id).then(
        (s) => s.status === 'running',
        () => false,
      );
      if (!running || Date.now() > until) return running;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Starts the command; `listener` gets the start event, output and the end event. Resolves when the
   * command ends, with whether it ran past `timeoutMs` (then it was killed), or that its sandbox went
   * away under it (then no end event comes: envd's stream would just drop).
   */
  async start(p: Principal, id: string, req: StartRequest, listener: Listener): Promise<Outcome> {
    const pid = this.nextPid++;
    const c = req.process;
    const proc: Proc = { pid, tag: req.tag, config: c, listeners: new Set([listener]), pty: !!req.pty, signal: () => {} };
    const emit = (msg: unknown) => {
      for (const l of proc.listeners) l(msg);
    };
    const table = this.bySandbox.get(id) ?? new Map<number, Proc>();
    // Errors before the command starts (no such sandbox, a bad cwd) come before a pid is handed out.
    const started = () => {
      table.set(pid, proc);
      this.bySandbox.set(id, table);
      emit({ event: { start: { pid } } });
    };
    const env = { ...userEnv(req.user), ...c.envs };
    const cwd = c.cwd || req.user.workdir || req.user.home;
    // The exec starts before its command's cwd is entered: a cwd of the caller's is checked first.
    if (c.cwd && !req.stdin && !req.pty) await this.checkCwd(p, id, req.user, cwd);
    try {
      const run: Run = { p, id, proc, req, env, cwd, started, emit };
      const r = req.stdin || req.pty ? await this.viaHelper(run) : await this.viaExec(run);
      if ('vanished' in r) {
        emit(VANISHED);
        return r;
      }
      emit({ event: { end: endEvent(r) } });
      return { timedOut: r.timedOut };
    } catch (e) {
      if (table.has(pid) && !(await this.alive(p, id))) {
        emit(VANISHED);
        return { vanished: true };
      }
      throw e;
    } finally {
      table.delete(pid);
      if (table.size === 0 && this.bySandbox.get(id) === table) this.bySandbox.delete(id);
    }
  }

  /** A plain command: nube's streamed exec (its deadline and kill are the exec's). */
  private async viaExec({ p, id, proc, req, env, cwd, started, emit }: Run) {
    const kill = new AbortController();
    let killed: number | undefined;
    proc.signal = (sig) => {
      killed = sig;
      kill.abort();
    };
    const argv = asUser(req.user, [req.process.cmd, ...req.process.args]);
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      argv,
      { cwd, env, timeoutMs: req.timeoutMs, signal: kill.signal },
      {
        stdout: (b) => emit({ event: { data: { stdout: b.toString('base64') } } }),
        stderr: (b) => emit({ event: { data: { stderr: b.toString('base64') } } }),
      },
      started,
    );
    // A command the sandbox's end killed looks like any killed command: ask.
    if (killed === undefined && !r.timedOut && r.exitCode > 128 && !(await this.alive(p, id, 0))) return { vanished: true } as const;
    const signal = r.timedOut ? 9 : killed;
    return { code: r.exitCode, signal, timedOut: r.timedOut };
  }

  /** A command that takes input: the sandbox's helper, with a pipe or a PTY. */
  private async viaHelper({ p, id, proc, req, env, cwd, started, emit }: Run): Promise<{ code: number; signal?: number; timedOut: boolean } | { vanished: true }> {
    await this.sandboxes.work.active(p, id);
    const h = await this.sandboxes.ssh.run(id, {
      mode: 'run',
      cmd: null,
      argv: [req.process.cmd, ...req.process.args],
      cwd,
      env,
      ...(req.user.uid !== 0 ? { user: { uid: req.user.uid, gid: req.user.gid, groups: req.user.groups } } : {}),
      ...(req.pty ? { pty: req.pty } : {}),
    });
    proc.helper = h;
    proc.signal = (sig) => h.signal(sig);
    const out = req.pty ? 'pty' : 'stdout';
    h.on('stdout', (b) => emit({ event: { data: { [out]: b.toString('base64') } } }));
    h.on('stderr', (b) => emit({ event: { data: { stderr: b.toString('base64') } } }));
    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await new Promise((resolve, reject) => {
        let signal: number | undefined;
        h.once('started', () => {
          started();
          if (req.timeoutMs) {
            timer = setTimeout(() => {
              timedOut = true;
              h.signal(9);
            }, req.timeoutMs);
          }
        });
        h.once('failed', (why) => reject(new ConnectError('invalid_argument', `cannot start ${req.process.cmd}: ${why}`)));
        h.on('signal', (s) => {
          signal = s;
        });
        h.once('exit', (code) => {
          if (h.ended) return resolve({ code, signal, timedOut });
          // The connection dropped without a status: the helper is gone, and with it most likely the
          // sandbox (said once it really is, so that its health says so too).
          this.alive(p, id).then(
            (up) => (up ? reject(new ConnectError('unavailable', 'the sandbox helper running this process went away')) : resolve({ vanished: true })),
            reject,
          );
        });
      });
    } finally {
      if (timer) clearTimeout(timer);
      h.close();
    }
  }

  /** envd refuses a working directory that does not exist, before starting anything. */
  private async checkCwd(p: Principal, id: string, user: E2bUser, cwd: string): Promise<void> {
    const r = await this.sandboxes.work.execStream(p, id, asUser(user, ['test', '-d', cwd]), { cwd: '/' }, { stdout: () => {}, stderr: () => {} });
    if (r.exitCode !== 0) throw new ConnectError('invalid_argument', `cwd '${cwd}' does not exist`);
  }

  /** The sandbox's processes are gone (it was paused): out of the table, their listeners told. */
  ended(id: string): void {
    const t = this.bySandbox.get(id);
    this.bySandbox.delete(id);
    for (const proc of t?.values() ?? []) for (const l of proc.listeners) l(VANISHED);
  }

  /** Attach to a running process: its start event now, then its output and end. */
  attach(id: string, selector: Selector | undefined, listener: Listener): () => void {
    const proc = this.find(id, selector);
    listener({ event: { start: { pid: proc.pid } } });
    proc.listeners.add(listener);
    return () => proc.listeners.delete(listener);
  }

  detach(id: string, pid: number, listener: Listener): void {
    this.bySandbox.get(id)?.get(pid)?.listeners.delete(listener);
  }

  signal(id: string, selector: Selector | undefined, sig: number): void {
    this.find(id, selector).signal(sig);
  }

  sendInput(id: string, selector: Selector | undefined, input: { stdin?: Buffer; pty?: Buffer }): void {
    const proc = this.find(id, selector);
    if (!proc.helper) throw new ConnectError('failed_precondition', `process ${proc.pid} was started without stdin`);
    if (input.pty && !proc.pty) throw new ConnectError('failed_precondition', `process ${proc.pid} has no PTY`);
    if (input.stdin && proc.pty) throw new ConnectError('failed_precondition', `process ${proc.pid} reads its PTY, not stdin`);
    proc.helper.write(input.pty ?? input.stdin ?? Buffer.alloc(0));
  }

  closeStdin(id: string, selector: Selector | undefined): void {
    const proc = this.find(id, selector);
    if (!proc.helper || proc.pty) throw new ConnectError('failed_precondition', `process ${proc.pid} has no stdin to close`);
    proc.helper.end();
  }

  resize(id: string, selector: Selector | undefined, size: { rows: number; cols: number }): void {
    const proc = this.find(id, selector);
    if (!proc.helper || !proc.pty) throw new ConnectError('failed_precondition', `process ${proc.pid} has no PTY`);
    proc.helper.resize(size.rows, size.cols);
  }
}
