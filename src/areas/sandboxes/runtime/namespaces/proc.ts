import { spawn } from 'node:child_process';

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

export interface RunOptions {
  input?: string | Uint8Array;
  env?: NodeJS.ProcessEnv;
  /** Resolve with the exit code instead of rejecting when the command fails. */
  allowFailure?: boolean;
  onLine?: (line: string) => void;
}

/** Run a host command by argv (never through a shell) and collect its output. */
export function run(cmd: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let partial = '';
    const feed = (chunk: Buffer) => {
      if (!opts.onLine) return;
      partial += chunk.toString('utf8');
      const lines = partial.split(/\r?\n|\r/);
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim()) opts.onLine(line);
    };
    child.stdout.on('data', (c: Buffer) => {
      out.push(c);
      feed(c);
    });
    child.stderr.on('data', (c: Buffer) => {
      err.push(c);
      feed(c);
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const res = {
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        code: code ?? 128 + (signal ? 9 : 0),
      };
      if (res.code !== 0 && !opts.allowFailure) {
        reject(new Error(`${cmd} ${args.join(' ')} failed (${res.code}): ${res.stderr.trim().slice(-2000)}`));
      } else resolve(res);
    });
    child.stdin.on('error', () => {});
    child.stdin.end(opts.input ?? '');
  });
}

/** Whether a pid exists (signal 0 checks without sending anything). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
