// The spawner: one long-lived `nube-helper serve` per runtime, so nube (a large process) never forks
// per exec. Forking a Node process with a few hundred MB mapped costs milliseconds of page-table copy
// and teardown; the helper is a few hundred KB. Each exec is one unix-socket connection: a request
// (target, cgroups, cwd, deadline, env, argv, stdin), then frames of stdout, stderr and status. The
// protocol is described in helper/nube-helper.c (serve). Closing the connection kills the command.
// A sandbox exec'd lately keeps one resident connection (helper/resident.c): its commands go one
// after another over it, each made by a process already inside the sandbox.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { SandboxRuntimeError } from '../driver.js';
import { inSpan } from '../../../../platform/tracing.js';

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

/** Where a command runs: known before the command (a resident session is made from it). */
export type SpawnHead = Pick<SpawnRequest, 'target' | 'cgroups' | 'execCgroups'>;
/** The command itself: what a resident session gets per command. */
export type SpawnRest = Omit<SpawnRequest, keyof SpawnHead>;

/** Resident sessions kept at once (sandboxes exec'd lately); the oldest idle one goes past it. */
const MAX_RESIDENTS = 64;
/** Resident sessions per sandbox: long commands (a server started through E2B) keep theirs busy. */
const PER_KEY = 3;

/** A resident session (helper/resident.c): one connection for a sandbox's commands, one at a time. */
interface Resident {
  sock: Socket;
  chunks: Buffer[];
  closed: boolean;
  busy: boolean;
  /** Closed by us (its sandbox stopped) while a command ran: that command is not run again. */
  dropped?: boolean;
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

function encodeFields(fields: string[], stdin: Buffer): Buffer {
  if (fields.some((f) => f.includes('\0'))) {
    throw new SandboxRuntimeError('InvalidInput', 'command, cwd and env must not contain NUL bytes');
  }
  const body = Buffer.from(`${fields.join('\0')}\0`, 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(body.length);
  return Buffer.concat([len, body, stdin]);
}

function headFields(req: SpawnHead): string[] {
  return [`t:${req.target}`, ...req.cgroups.map((c) => `c:${c}`), ...req.execCgroups.map((c) => `x:${c}`)];
}

function restFields(req: SpawnRest, stdin: Buffer): string[] {
  const fields = [`d:${req.cwd}`, `i:${stdin.length}`];
  if (req.timeoutMs) fields.push(`m:${req.timeoutMs}`);
  for (const [k, v] of Object.entries(req.env)) fields.push(`e:${k}=${v}`);
  for (const a of req.argv) fields.push(`a:${a}`);
  return fields;
}

export function encodeRequest(req: SpawnRequest, stdin: Buffer): Buffer {
  return encodeFields([...headFields(req), ...restFields(req, stdin)], stdin);
}

/**
 * Hands a session's output to `sinks` and resolves with its last status line (null: it ended with no
 * frame at all, which tells that nothing ran). It resolves as soon as the final status frame arrives
 * (the helper sends it last, after all output, once the command and whatever it left are gone),
 * without waiting for the session process to exit and the connection to close; `keep` leaves the
 * connection open for the next command (a resident session), else it is closed. Aborting `signal`
 * closes the connection, which kills the command's process group: "signal 9".
 */
function relay(sock: Socket, sinks: SpawnSinks, timeoutMs: number | undefined, pending: Buffer[] = [], signal?: AbortSignal, keep = false) {
  return new Promise<string | null>((resolve, reject) => {
    const abort = () => sock.destroy();
    if (signal?.aborted) abort();
    else signal?.addEventListener('abort', abort, { once: true });
    let buf: Buffer = pending.length ? Buffer.concat(pending) : Buffer.alloc(0);
    let status = '';
    let framed = false;
    let settled = false;
    let hung = false;
    // Belt and braces: if the helper hangs past the deadline, closing the connection kills the group.
    const guard = timeoutMs
      ? setTimeout(() => {
          hung = true;
          sock.destroy();
        }, timeoutMs + 5000)
      : undefined;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      if (guard) clearTimeout(guard);
      signal?.removeEventListener('abort', abort);
      sock.off('data', onData);
      sock.off('error', onError);
      sock.off('close', onClose);
      fn();
    };
    function onData(c: Buffer) {
      buf = buf.length ? Buffer.concat([buf, c]) : c;
      while (buf.length >= 5) {
        const len = buf.readUInt32LE(1);
        if (buf.length < 5 + len) break;
        const type = buf[0];
        const data = buf.subarray(5, 5 + len);
        buf = buf.subarray(5 + len);
        framed = true;
        if (type === 0x6f) sinks.stdout(data);
        else if (type === 0x65) sinks.stderr(data);
        else if (type === 0x73) {
          status += data.toString();
          const last = finalStatus(status);
          if (last) {
            settle(() => resolve(last));
            if (!keep) sock.destroy();
            return;
          }
        }
      }
    }
    let failure: Error | undefined;
    function onError(e: Error) {
      failure = e;
    }
    function onClose() {
      const last = status.trim().split('\n').pop() ?? '';
      if (signal?.aborted) settle(() => resolve('signal 9'));
      else if (hung) settle(() => reject(new Error('nube-helper serve did not end the exec 5 s past its deadline')));
      // Nothing came: nothing ran. A resident session may have ended (its sandbox stopped) just as
      // this command was written to it, which fails the write: that is the same answer.
      else if (!framed && (!failure || keep)) settle(() => resolve(null));
      else settle(() => reject(failure ?? new Error(`nube-helper serve ended the exec without a status (${last || 'nothing'})`)));
    }
    sock.on('data', onData);
    sock.on('error', onError);
    sock.on('close', onClose);
    onData(Buffer.alloc(0));
  });
}

/** The final status line ("exit C" / "signal S", + " timeout") once the status text holds one. */
function finalStatus(status: string): string | null {
  if (!status.endsWith('\n')) return null;
  const last = status.slice(status.lastIndexOf('\n', status.length - 2) + 1, -1);
  return /^(exit|signal) /.test(last) ? last : null;
}

export class Spawner {
  private server: ChildProcess | null = null;
  private starting: Promise<string> | null = null;
  private readonly residents = new Map<string, Resident[]>();
  /** Resident sessions in `residents`, all keys together. */
  private count = 0;

  constructor(
    private readonly helper: string,
    private readonly dataDir: string,
    /** Where the static sh is (../static-sh.ts); null: every command runs as named. */
    private readonly staticShDir: string | null = null,
  ) {}

  private start(): Promise<string> {
    this.starting ??= (async () => {
      await mkdir(`${this.dataDir}/run`, { recursive: true, mode: 0o700 });
      const path = socketPath(this.dataDir);
      // Nothing of nube's environment (its secrets among it): commands get theirs from each request,
      // and a resident session's zygote lives inside a sandbox.
      const env = { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' };
      const child = spawn(this.helper, ['serve', path, ...(this.staticShDir ? [this.staticShDir] : [])], { stdio: ['pipe', 'pipe', 'inherit'], env });
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
  run(req: SpawnRequest, sinks: SpawnSinks, signal?: AbortSignal): Promise<string> {
    return inSpan('sandbox spawn', { 'process.command': req.argv[0] ?? '' }, () => this.runOnce(req, sinks, signal));
  }

  private async runOnce(req: SpawnRequest, sinks: SpawnSinks, signal?: AbortSignal): Promise<string> {
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

  /**
   * One request that is not a command (the start of a sandbox, helper/launch.c): resolves with what
   * the helper wrote on stdout when it ends with "exit 0", rejects with its stderr otherwise.
   */
  async request(fields: string[]): Promise<string> {
    const payload = encodeFields(fields, Buffer.alloc(0));
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const sinks = { stdout: (c: Buffer) => out.push(c), stderr: (c: Buffer) => err.push(c) };
    let status: string;
    try {
      status = await this.connectAndRun(await this.start(), payload, undefined, sinks);
    } catch (e) {
      if (!(e as { notConnected?: boolean }).notConnected) throw e;
      this.stopServer();
      status = await this.connectAndRun(await this.start(), payload, undefined, sinks);
    }
    if (status !== 'exit 0') throw new Error(Buffer.concat(err).toString().trim() || `nube-helper: ${status}`);
    return Buffer.concat(out).toString();
  }

  private connectAndRun(
    path: string,
    payload: Buffer,
    timeoutMs: number | undefined,
    sinks: SpawnSinks,
    signal?: AbortSignal,
  ): Promise<string> {
    const sock = connect(path);
    let connected = false;
    sock.on('connect', () => {
      connected = true;
      sock.write(payload);
    });
    return relay(sock, sinks, timeoutMs, [], signal).then(
      (status) => {
        if (status === null) throw new Error('nube-helper serve ended the exec without a status (nothing)');
        return status;
      },
      (e: Error) => {
        throw connected ? e : Object.assign(e, { notConnected: true });
      },
    );
  }

  /**
   * Run a command in an idle resident session of `key` (helper/resident.c: a process already inside
   * the sandbox makes the command's, prepared before it is asked for). `key` must change when the
   * target does (a restarted sandbox). Without an idle one (the sandbox's residents are busy with
   * long commands, or it has none yet, or one ended before this command started: its sandbox
   * stopped), the command runs in a session of its own (`run`) while another resident is made, up to
   * PER_KEY of them.
   */
  runResident(key: string, head: () => SpawnHead, rest: SpawnRest, sinks: SpawnSinks, signal?: AbortSignal): Promise<string> {
    return inSpan('sandbox spawn', { 'process.command': rest.argv[0] ?? '', 'nube.spawn.resident': true }, () =>
      this.runResidentOnce(key, head, rest, sinks, signal),
    );
  }

  private async runResidentOnce(key: string, head: () => SpawnHead, rest: SpawnRest, sinks: SpawnSinks, signal?: AbortSignal): Promise<string> {
    // Encoded first: a request refused here (a NUL) must not take a resident session.
    const stdin = Buffer.from(rest.stdin ?? '');
    const payload = encodeFields(restFields(rest, stdin), stdin);
    const p = this.residents.get(key)?.find((x) => !x.closed && !x.busy);
    if (p) {
      p.busy = true;
      p.sock.ref();
      p.sock.removeAllListeners('data');
      p.sock.removeAllListeners('close');
      const chunks = p.chunks;
      p.chunks = [];
      const done = relay(p.sock, sinks, rest.timeoutMs, chunks, signal, true);
      p.sock.write(payload);
      const status = await done.finally(() => this.idle(key, p));
      if (status !== null) return status;
      if (p.dropped) throw new SandboxRuntimeError('InvalidState', 'the sandbox stopped while the command ran');
    }
    this.openSoon(key, head());
    return this.run({ ...head(), ...rest }, sinks, signal);
  }

  /** A resident session between commands: output kept for the next, its end noted, not keeping us alive. */
  private idle(key: string, p: Resident): void {
    p.busy = false;
    if (p.sock.destroyed) p.closed = true;
    if (p.closed) {
      this.drop(key, p);
      return;
    }
    p.sock.on('data', (c: Buffer) => p.chunks.push(c));
    p.sock.on('close', () => {
      p.closed = true;
      if (!p.busy) this.drop(key, p);
    });
    p.sock.unref();
  }

  private drop(key: string, p: Resident): void {
    const list = this.residents.get(key);
    const i = list?.indexOf(p) ?? -1;
    if (!list || i < 0) return;
    list.splice(i, 1);
    this.count--;
    if (list.length === 0) this.residents.delete(key);
  }

  /** Make a resident session for `key` now (a sandbox that just started), unless it has one. */
  openAhead(key: string, head: SpawnHead): void {
    if (!this.residents.get(key)?.length) this.openSoon(key, head);
  }

  private openSoon(key: string, head: SpawnHead): void {
    this.openResident(key, head).catch(() => {});
  }

  private async openResident(key: string, head: SpawnHead): Promise<void> {
    const path = await this.start();
    const list = this.residents.get(key) ?? [];
    if (list.length >= PER_KEY || list.some((x) => !x.closed && !x.busy)) return;
    const sock = connect(path);
    const p: Resident = { sock, chunks: [], closed: false, busy: false };
    // Errors show as the connection's end (close), where they are handled.
    sock.on('error', () => {});
    list.push(p);
    this.residents.set(key, list);
    this.count++;
    this.idle(key, p);
    sock.write(encodeFields([...headFields(head), 'r:1'], Buffer.alloc(0)));
    if (this.count > MAX_RESIDENTS) this.evictOne();
  }

  /** The oldest idle resident session goes (a busy one's command would be killed). */
  private evictOne(): void {
    for (const [key, list] of this.residents) {
      const q = list.find((x) => !x.busy);
      if (!q) continue;
      this.drop(key, q);
      q.closed = true;
      q.sock.destroy();
      return;
    }
  }

  /** Drop the resident sessions of keys starting with `prefix` (a sandbox that stops). */
  forget(prefix: string): void {
    for (const [key, list] of this.residents) {
      if (!key.startsWith(prefix)) continue;
      this.residents.delete(key);
      this.count -= list.length;
      for (const p of list) {
        p.dropped = p.busy;
        p.closed = true;
        p.sock.destroy();
      }
    }
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
    this.forget('');
    this.stopServer();
  }
}
