// The spawner: one long-lived `nube-helper serve` per runtime, so nube (a large process) never forks
// per exec. Forking a Node process with a few hundred MB mapped costs milliseconds of page-table copy
// and teardown; the helper is a few hundred KB. Each exec is one unix-socket connection: a request
// (target, cgroups, cwd, deadline, env, argv, stdin), then frames of stdout, stderr and status. The
// protocol is described in helper/nube-helper.c (serve). Closing the connection kills the command.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { SandboxRuntimeError } from '../driver.js';

export interface SpawnRequest {
  target: number;
  cgroups: string[];
  /** Created by the helper, swept (every process in it killed) and removed when the command ends. */
  execCgroups: string[];
  cwd: string;
  timeoutMs?: number;
  env: Record<string, string>;
  argv: string[];
  stdin?: string | Uint8Array;
}

export interface SpawnSinks {
  stdout(chunk: Buffer): void;
  stderr(chunk: Buffer): void;
}

/** sun_path holds 108 bytes; a deep data dir falls back to a private directory under the tmp dir. */
function socketPath(dataDir: string): string {
  const p = `${dataDir}/run/spawner-${process.pid}.sock`;
  return p.length < 100 ? p : `${mkdtempSync(`${tmpdir()}/nube-spawner-`)}/s.sock`;
}

export function encodeRequest(req: SpawnRequest, stdin: Buffer): Buffer {
  const fields: string[] = [`t:${req.target}`, `d:${req.cwd}`, `i:${stdin.length}`];
  for (const c of req.cgroups) fields.push(`c:${c}`);
  for (const c of req.execCgroups) fields.push(`x:${c}`);
  if (req.timeoutMs) fields.push(`m:${req.timeoutMs}`);
  for (const [k, v] of Object.entries(req.env)) fields.push(`e:${k}=${v}`);
  for (const a of req.argv) fields.push(`a:${a}`);
  if (fields.some((f) => f.includes('\0'))) {
    throw new SandboxRuntimeError('InvalidInput', 'command, cwd and env must not contain NUL bytes');
  }
  const body = Buffer.from(`${fields.join('\0')}\0`, 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(body.length);
  return Buffer.concat([len, body, stdin]);
}

export class Spawner {
  private server: ChildProcess | null = null;
  private starting: Promise<string> | null = null;

  constructor(
    private readonly helper: string,
    private readonly dataDir: string,
  ) {}

  private start(): Promise<string> {
    this.starting ??= (async () => {
      await mkdir(`${this.dataDir}/run`, { recursive: true, mode: 0o700 });
      const path = socketPath(this.dataDir);
      const child = spawn(this.helper, ['serve', path], { stdio: ['pipe', 'pipe', 'inherit'] });
      this.server = child;
      await new Promise<void>((resolve, reject) => {
        let seen = '';
        child.once('error', reject);
        child.once('exit', (code) =>
          reject(new Error(`nube-helper serve exited (${code}) before it was ready`)),
        );
        child.stdout?.on('data', (c: Buffer) => {
          seen += c.toString();
          if (seen.includes('ready\n')) resolve();
        });
      });
      child.removeAllListeners('exit');
      child.removeAllListeners('error');
      child.on('error', () => {});
      // It ends by itself when we go away (its stdin closes); it must not keep our event loop alive.
      child.on('exit', () => {
        if (this.server === child) {
          this.server = null;
          this.starting = null;
        }
      });
      child.unref();
      for (const s of [child.stdin, child.stdout]) (s as unknown as { unref?: () => void } | null)?.unref?.();
      return path;
    })();
    this.starting.catch(() => {
      this.starting = null;
    });
    return this.starting;
  }

  /**
   * Run one command; resolves with the last status line ("exit C", "signal S", + " timeout"). Aborting
   * `signal` closes the connection, which kills the command's process group: it resolves "signal 9".
   */
  async run(req: SpawnRequest, sinks: SpawnSinks, signal?: AbortSignal): Promise<string> {
    const payload = encodeRequest(req, Buffer.from(req.stdin ?? ''));
    try {
      return await this.connectAndRun(await this.start(), payload, req.timeoutMs, sinks, signal);
    } catch (e) {
      // The spawner died (or was killed) between two execs: start a new one, once. Nothing ran.
      if ((e as { notConnected?: boolean }).notConnected) {
        this.stopServer();
        return this.connectAndRun(await this.start(), payload, req.timeoutMs, sinks, signal);
      }
      throw e;
    }
  }

  private connectAndRun(
    path: string,
    payload: Buffer,
    timeoutMs: number | undefined,
    sinks: SpawnSinks,
    signal?: AbortSignal,
  ): Promise<string> {
    return new Promise((resolve, reject) => {
      const sock = connect(path);
      const abort = () => sock.destroy();
      if (signal?.aborted) abort();
      else signal?.addEventListener('abort', abort, { once: true });
      let connected = false;
      let buf: Buffer = Buffer.alloc(0);
      let status = '';
      // Belt and braces: if the helper hangs past the deadline, closing the connection kills the group.
      const guard = timeoutMs ? setTimeout(() => sock.destroy(), timeoutMs + 5000) : undefined;
      sock.on('connect', () => {
        connected = true;
        sock.write(payload);
      });
      sock.on('data', (c: Buffer) => {
        buf = buf.length ? Buffer.concat([buf, c]) : c;
        while (buf.length >= 5) {
          const len = buf.readUInt32LE(1);
          if (buf.length < 5 + len) break;
          const type = buf[0];
          const data = buf.subarray(5, 5 + len);
          buf = buf.subarray(5 + len);
          if (type === 0x6f) sinks.stdout(data);
          else if (type === 0x65) sinks.stderr(data);
          else if (type === 0x73) status += data.toString();
        }
      });
      let failure: Error | undefined;
      sock.on('error', (e) => {
        failure = connected ? e : Object.assign(e, { notConnected: true });
      });
      sock.on('close', () => {
        if (guard) clearTimeout(guard);
        signal?.removeEventListener('abort', abort);
        const last = status.trim().split('\n').pop() ?? '';
        if (/^(exit|signal) /.test(last)) resolve(last);
        else if (signal?.aborted && connected) resolve('signal 9');
        else
          reject(
            failure ?? new Error(`nube-helper serve ended the exec without a status (${last || 'nothing'})`),
          );
      });
    });
  }

  private stopServer(): void {
    const s = this.server;
    this.server = null;
    this.starting = null;
    if (s) {
      s.stdin?.end();
      s.kill('SIGTERM');
    }
  }

  close(): void {
    this.stopServer();
  }
}
