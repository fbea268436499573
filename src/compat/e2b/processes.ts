// envd's process service (process.Process) over nube's streamed exec. A process lives as long as its
// exec: the stream that started it may go away (`disconnect`, a background command) and others may
// attach (`Connect`) while it runs. Pids are this adapter's, per sandbox; the table is in memory, so a
// restart of nube ends what it ran this way (nube's own /bg processes are the durable kind).
import { randomBytes } from 'node:crypto';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';
import { HOME } from './filesystem.js';

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

type Listener = (msg: unknown) => void;

interface Proc {
  pid: number;
  tag?: string;
  config: ProcessConfig;
  listeners: Set<Listener>;
  kill: AbortController;
  /** FIFO inside the sandbox the process reads as stdin (started with `stdin: true`). */
  fifo?: string;
}

export interface StartRequest {
  process: ProcessConfig;
  tag?: string;
  stdin: boolean;
  timeoutMs?: number;
}

// The FIFO is opened read-write by the shell that runs the command, so writers come and go (one
// `cat` per SendInput) without the command ever seeing end of input. $1: FIFO, the rest: the argv.
const WITH_STDIN = 'f=$1; shift; mkfifo -m 600 "$f" || exit 126; "$@" <>"$f"; rc=$?; rm -f "$f"; exit $rc';
// Input may come right after the start event, before the command's shell made the FIFO: wait for it
// a little (up to 2 s), not when it is gone because the command ended (then the wait runs out).
const SEND_INPUT = 'i=0; while [ ! -p "$1" ] && [ $i -lt 100 ]; do sleep 0.02; i=$((i+1)); done; [ -p "$1" ] || exit 3; cat > "$1"';

export class Processes {
  private readonly bySandbox = new Map<string, Map<number, Proc>>();
  private nextPid = 1000;

  constructor(private readonly sandboxes: SandboxesService) {}

  private table(id: string): Map<number, Proc> {
    const t = this.bySandbox.get(id) ?? new Map<number, Proc>();
    this.bySandbox.set(id, t);
    return t;
  }

  find(id: string, selector: { pid?: number; tag?: string } | undefined): Proc {
    const t = this.bySandbox.get(id);
    const proc =
      selector?.pid !== undefined
        ? t?.get(Number(selector.pid))
        : [...(t?.values() ?? [])].find((x) => selector?.tag !== undefined && x.tag === selector.tag);
    if (!proc) throw new ConnectError('not_found', `process ${selector?.pid ?? selector?.tag ?? ''} not found`);
    return proc;
  }

  list(id: string) {
    return [...(this.bySandbox.get(id)?.values() ?? [])].map((x) => ({
      config: x.config,
      pid: x.pid,
      ...(x.tag ? { tag: x.tag } : {}),
    }));
  }

  /**
   * Starts the command; `listener` gets the start event, output and the end event. Resolves when the
   * command ends, with whether it ran past `timeoutMs` (then it was killed).
   */
  async start(p: Principal, id: string, req: StartRequest, listener: Listener): Promise<{ timedOut: boolean }> {
    const pid = this.nextPid++;
    const c = req.process;
    const fifo = req.stdin ? `/tmp/.e2b-stdin-${pid}-${randomBytes(4).toString('hex')}` : undefined;
    const argv = fifo ? ['/bin/sh', '-c', WITH_STDIN, 'sh', fifo, c.cmd, ...c.args] : [c.cmd, ...c.args];
    const proc: Proc = { pid, tag: req.tag, config: c, listeners: new Set([listener]), kill: new AbortController(), fifo };
    const table = this.table(id);
    const emit = (msg: unknown) => {
      for (const l of proc.listeners) l(msg);
    };
    // Errors before the command starts (no such sandbox, not running) come before a pid is handed out.
    const ready = () => {
      table.set(pid, proc);
      emit({ event: { start: { pid } } });
    };
    let killed = false;
    proc.kill.signal.addEventListener('abort', () => {
      killed = true;
    });
    try {
      const r = await this.sandboxes.work.execStream(
        p,
        id,
        argv,
        { cwd: c.cwd || HOME, env: { HOME, ...c.envs }, timeoutMs: req.timeoutMs, signal: proc.kill.signal },
        {
          stdout: (b) => emit({ event: { data: { stdout: b.toString('base64') } } }),
          stderr: (b) => emit({ event: { data: { stderr: b.toString('base64') } } }),
        },
        ready,
      );
      const signalled = killed || r.timedOut;
      emit({
        event: {
          end: signalled
            ? { exitCode: -1, exited: false, status: 'signal: killed', error: 'signal: killed' }
            : {
                exitCode: r.exitCode,
                exited: true,
                status: `exit status ${r.exitCode}`,
                ...(r.exitCode !== 0 ? { error: `exit status ${r.exitCode}` } : {}),
              },
        },
      });
      return { timedOut: r.timedOut };
    } finally {
      table.delete(pid);
      if (table.size === 0) this.bySandbox.delete(id);
    }
  }

  /** Attach to a running process: its start event now, then its output and end. */
  attach(id: string, selector: { pid?: number; tag?: string } | undefined, listener: Listener): () => void {
    const proc = this.find(id, selector);
    listener({ event: { start: { pid: proc.pid } } });
    proc.listeners.add(listener);
    return () => proc.listeners.delete(listener);
  }

  detach(id: string, pid: number, listener: Listener): void {
    this.bySandbox.get(id)?.get(pid)?.listeners.delete(listener);
  }

  kill(id: string, selector: { pid?: number; tag?: string } | undefined): void {
    this.find(id, selector).kill.abort();
  }

  async sendInput(p: Principal, id: string, selector: { pid?: number; tag?: string } | undefined, data: Buffer) {
    const proc = this.find(id, selector);
    if (!proc.fifo) throw new ConnectError('failed_precondition', `process ${proc.pid} was started without stdin`);
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      ['/bin/sh', '-c', SEND_INPUT, 'sh', proc.fifo],
      { stdin: data, timeoutMs: 10_000 },
      { stdout: () => {}, stderr: () => {} },
    );
    if (r.exitCode !== 0) throw new ConnectError('not_found', `process ${proc.pid} no longer reads its input`);
  }
}
