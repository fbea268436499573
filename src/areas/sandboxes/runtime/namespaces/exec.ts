import { randomBytes } from 'node:crypto';
import type { ExecResult } from '../driver.js';
import type { SandboxCgroup } from './cgroups.js';
import type { Spawner } from './spawner.js';
import type { SandboxRecord } from './state.js';

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface EnterOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  maxOutputBytes: number;
  /** Output handed over as it comes instead of captured (the result's stdout and stderr are then empty). */
  sinks?: { stdout(c: Buffer): void; stderr(c: Buffer): void };
  /** Aborting kills the command's process group. */
  signal?: AbortSignal;
}

export interface RawResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

export function sandboxEnv(rec: SandboxRecord, extra?: Record<string, string>): Record<string, string> {
  return {
    PATH: DEFAULT_PATH,
    HOME: '/root',
    HOSTNAME: rec.id,
    LANG: 'C.UTF-8',
    TERM: 'xterm',
    ...rec.env,
    ...extra,
  };
}

export class Capture {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly max: number) {}
  push(c: Buffer) {
    const room = this.max - this.size;
    if (room <= 0) {
      this.truncated = true;
      return;
    }
    const part = c.length > room ? c.subarray(0, room) : c;
    if (part.length < c.length) this.truncated = true;
    this.chunks.push(part);
    this.size += part.length;
  }
  get buffer() {
    return Buffer.concat(this.chunks);
  }
}

/** Resident sessions are kept per running init (a restarted sandbox has another key). */
function sessionKey(rec: SandboxRecord): string {
  return `${rec.id}:${rec.init!.innerPid}:${rec.init!.startTime}`;
}

function sessionHead(rec: SandboxRecord, cg: SandboxCgroup) {
  return { target: rec.init!.innerPid, ...cg.execJoin(`x${randomBytes(6).toString('hex')}`) };
}

/**
 * A sandbox just started: open its resident session now (its zygote in the sandbox, the first
 * command's process made), while the caller gets its answer, so that exec is as quick as the ones after it.
 */
export function prepareFirstExec(spawner: Spawner, rec: SandboxRecord, cg: SandboxCgroup): void {
  if (rec.init) spawner.openAhead(sessionKey(rec), sessionHead(rec, cg));
}

/**
 * Run an argv inside the sandbox through the spawner (nube-helper serve). The command gets its own
 * exec cgroup (under the sandbox's pids cgroup) and process group: the deadline and the end of the
 * command both kill whatever is left, so a backgrounded child does not outlive `exec`.
 */
export async function enterArgv(
  spawner: Spawner,
  rec: SandboxRecord,
  cg: SandboxCgroup,
  argv: string[],
  opts: EnterOptions,
): Promise<RawResult> {
  if (!rec.init) throw new Error('sandbox is not running');
  const out = new Capture(opts.maxOutputBytes);
  const err = new Capture(opts.maxOutputBytes);
  const started = performance.now();
  const status = await spawner.runResident(
    sessionKey(rec),
    () => sessionHead(rec, cg),
    {
      cwd: opts.cwd ?? '/root',
      timeoutMs: opts.timeoutMs,
      env: sandboxEnv(rec, opts.env),
      argv,
      stdin: opts.stdin,
    },
    opts.sinks ?? { stdout: (c) => out.push(c), stderr: (c) => err.push(c) },
    opts.signal,
  );
  const m = /^(exit|signal) (\d+)( timeout)?$/.exec(status);
  return {
    stdout: out.buffer,
    stderr: err.buffer,
    exitCode: m ? (m[1] === 'exit' ? Number(m[2]) : 128 + Number(m[2])) : 1,
    durationMs: Math.round((performance.now() - started) * 100) / 100,
    timedOut: Boolean(m?.[3]),
    truncated: out.truncated || err.truncated,
  };
}

export function toExecResult(r: RawResult): ExecResult {
  return {
    stdout: r.stdout.toString('utf8'),
    stderr: r.stderr.toString('utf8'),
    exitCode: r.exitCode,
    durationMs: r.durationMs,
    timedOut: r.timedOut,
    truncated: r.truncated,
  };
}
