import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { ExecResult } from '../driver.js';
import type { SandboxCgroup } from './cgroups.js';
import type { SandboxRecord } from './state.js';

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface EnterOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  maxOutputBytes: number;
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

class Capture {
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

/**
 * Run an argv inside the sandbox through nube-helper. The command gets its own exec cgroup (under
 * the sandbox's pids cgroup) and process group: the deadline and the end of the command both kill
 * whatever is left, so a backgrounded child does not outlive `exec`.
 */
export async function enterArgv(
  helper: string,
  rec: SandboxRecord,
  cg: SandboxCgroup,
  argv: string[],
  opts: EnterOptions,
): Promise<RawResult> {
  if (!rec.init) throw new Error('sandbox is not running');
  const execCg = await cg.createExec(`x${randomBytes(6).toString('hex')}`);
  const args = ['enter', '--target', String(rec.init.innerPid), '--exec-cgroup', execCg];
  for (const c of ['memory', 'cpu', 'freezer'] as const) args.push('--cgroup', cg.dir(c));
  args.push('--cwd', opts.cwd ?? '/root', '--status-fd', '3');
  if (opts.timeoutMs) args.push('--timeout-ms', String(opts.timeoutMs));
  args.push('--', ...argv);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(helper, args, {
      env: sandboxEnv(rec, opts.env),
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    });
    const out = new Capture(opts.maxOutputBytes);
    const err = new Capture(opts.maxOutputBytes);
    let status = '';
    child.stdout?.on('data', (c: Buffer) => out.push(c));
    child.stderr?.on('data', (c: Buffer) => err.push(c));
    const statusPipe = child.stdio[3] as NodeJS.ReadableStream | null;
    statusPipe?.on('data', (c: Buffer) => {
      status += c.toString();
    });
    // Belt and braces: if the helper itself hangs past the deadline, SIGTERM makes it kill the group.
    const guard = opts.timeoutMs
      ? setTimeout(() => child.kill('SIGTERM'), opts.timeoutMs + 5000)
      : undefined;
    child.on('error', reject);
    child.on('close', (code) => {
      if (guard) clearTimeout(guard);
      const last = status.trim().split('\n').pop() ?? '';
      const m = /^(exit|signal) (\d+)( timeout)?$/.exec(last);
      const exitCode = m ? (m[1] === 'exit' ? Number(m[2]) : 128 + Number(m[2])) : (code ?? 1);
      resolve({
        stdout: out.buffer,
        stderr: err.buffer,
        exitCode,
        durationMs: Math.round((performance.now() - started) * 100) / 100,
        timedOut: Boolean(m?.[3]),
        truncated: out.truncated || err.truncated,
      });
    });
    child.stdin?.on('error', () => {});
    child.stdin?.end(opts.stdin ?? '');
  });
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
