import { chmod, chown, mkdir, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { Capture, type RawResult } from '../namespaces/exec.js';

/** Where the sandbox sees its agent socket (the host dir is bind-mounted read-only there). */
export const AGENT_DIR_INSIDE = '/.nube-agent';
export const AGENT_SOCKET_INSIDE = `${AGENT_DIR_INSIDE}/s`;

/** Frames both ways: [type u8][length u32 LE][payload]; see nube-agent.c. */
const MAX_CHUNK = 65536;
const MAX_REQUEST = 1 << 20;
// Connections the sandbox may hold open to nube at once: a worker per exec in flight plus the parked
// one. Past this nube closes new ones (root inside can connect as often as it likes).
const MAX_CONNECTIONS = 96;
const MAX_IDLE = 4;
/** How long an exec waits for a worker while the agent is known to be there, then falls back. */
const WAIT_PRESENT_MS = 2000;
/** How long the first exec after a launch waits for the agent's first worker. */
const WAIT_STARTING_MS = 5000;

export interface AgentRequest {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  maxOutputBytes: number;
  sinks?: { stdout(c: Buffer): void; stderr(c: Buffer): void };
  signal?: AbortSignal;
}

function frame(type: string, payload: Buffer): Buffer {
  const h = Buffer.alloc(5);
  h.write(type, 0, 'latin1');
  h.writeUInt32LE(payload.length, 1);
  return Buffer.concat([h, payload]);
}

/** The request frame's payload, or null when it is too large for the agent (then `runsc exec`). */
export function encodeRequest(r: Pick<AgentRequest, 'argv' | 'env' | 'cwd' | 'timeoutMs'>): Buffer | null {
  const env = Object.entries(r.env).map(([k, v]) => `${k}=${v}`);
  const fields = [String(r.timeoutMs ?? 0), r.cwd, String(r.argv.length), ...r.argv, String(env.length), ...env];
  // A NUL inside a field would shift every field after it: such a request goes the runsc way.
  if (fields.some((f) => f.includes('\0')) || fields.length > 8000) return null;
  const payload = Buffer.from(`${fields.join('\0')}\0`);
  return payload.length > MAX_REQUEST ? null : payload;
}

/**
 * The host end of one sandbox's agent: a unix socket its workers connect to (each connection is one
 * worker, parked until nube hands it a request). Nothing a connection says is trusted beyond the data
 * of that sandbox: frames are checked, sizes bounded, and an idle worker that speaks is dropped.
 */
export class AgentChannel {
  private readonly idle: Socket[] = [];
  private readonly waiters: Array<(s: Socket | null) => void> = [];
  private open = 0;
  private closed = false;

  private constructor(
    private readonly server: Server,
    /** starting: launched, no worker yet; present: workers came; absent: none came in time. */
    private state: 'starting' | 'present' | 'absent',
  ) {}

  /** Listen at `<dir>/s` (dir made 0700 for the sandbox's uid, whom the gofer connects as). */
  static async listen(dir: string, uid: number, launched: boolean): Promise<AgentChannel> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chown(dir, uid, uid);
    const path = `${dir}/s`;
    await rm(path, { force: true });
    const server = createServer();
    const ch = new AgentChannel(server, launched ? 'starting' : 'absent');
    server.on('connection', (s) => ch.accept(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve());
    });
    server.unref();
    await chmod(path, 0o600);
    await chown(path, uid, uid);
    return ch;
  }

  private accept(s: Socket): void {
    if (this.closed || this.open >= MAX_CONNECTIONS || this.idle.length >= MAX_IDLE) {
      s.destroy();
      return;
    }
    this.open++;
    this.state = 'present';
    s.unref();
    s.setNoDelay?.(true);
    s.on('close', () => {
      this.open--;
      const i = this.idle.indexOf(s);
      if (i >= 0) this.idle.splice(i, 1);
    });
    s.on('error', () => {});
    const waiter = this.waiters.shift();
    if (waiter) {
      waiter(s);
      return;
    }
    // A parked worker says nothing before its request.
    s.on('data', () => s.destroy());
    this.idle.push(s);
  }

  /** A parked worker, or null when none comes in time (the caller falls back to `runsc exec`). */
  take(): Promise<Socket | null> {
    const s = this.idle.shift();
    if (s) {
      s.removeAllListeners('data');
      return Promise.resolve(s);
    }
    if (this.closed || this.state === 'absent') return Promise.resolve(null);
    const waitMs = this.state === 'starting' ? WAIT_STARTING_MS : WAIT_PRESENT_MS;
    return new Promise((resolve) => {
      const done = (got: Socket | null) => {
        clearTimeout(timer);
        const i = this.waiters.indexOf(done);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(got);
      };
      const timer = setTimeout(() => {
        // No worker in time: the agent is gone (killed inside) or stuck; later calls go the runsc way
        // at once until a worker connects again.
        this.state = 'absent';
        done(null);
      }, waitMs);
      this.waiters.push(done);
    });
  }

  close(): void {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w(null);
    for (const s of this.idle.splice(0)) s.destroy();
    this.server.close();
  }
}

/**
 * Run one request on a worker's connection. Returns null when the worker ended without an exit
 * status (the caller says so; the command may have run).
 */
export function runOnWorker(s: Socket, payload: Buffer, r: AgentRequest): Promise<RawResult | null> {
  const out = new Capture(r.maxOutputBytes);
  const err = new Capture(r.maxOutputBytes);
  const started = performance.now();
  // Idle connections do not keep the process alive; one serving a command does.
  s.ref();
  return new Promise((resolve) => {
    let buf: Buffer = Buffer.alloc(0);
    let settled = false;
    const finish = (res: RawResult | null) => {
      if (settled) return;
      settled = true;
      if (guard) clearTimeout(guard);
      r.signal?.removeEventListener('abort', onAbort);
      s.destroy();
      resolve(res);
    };
    const elapsed = () => Math.round((performance.now() - started) * 100) / 100;
    const result = (exitCode: number, timedOut: boolean): RawResult => ({
      stdout: out.buffer,
      stderr: err.buffer,
      exitCode,
      durationMs: elapsed(),
      timedOut,
      truncated: out.truncated || err.truncated,
    });
    s.on('data', (c: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, c]) : c;
      while (buf.length >= 5) {
        const type = String.fromCharCode(buf[0]!);
        const len = buf.readUInt32LE(1);
        const ok = type === 'o' || type === 'r' ? len <= MAX_CHUNK : type === 'x' && len === 5;
        if (!ok) return finish(null);
        if (buf.length < 5 + len) break;
        const body = buf.subarray(5, 5 + len);
        buf = buf.subarray(5 + len);
        if (type === 'x') {
          const code = body.readInt32LE(0);
          const timedOut = body[4] === 1 && r.timeoutMs !== undefined;
          return finish(result(timedOut ? 137 : code < 0 || code > 255 ? 255 : code, timedOut));
        }
        const sink = type === 'o' ? r.sinks?.stdout : r.sinks?.stderr;
        if (sink) sink(Buffer.from(body));
        else (type === 'o' ? out : err).push(Buffer.from(body));
      }
    });
    s.on('close', () => finish(null));
    // The agent enforces the deadline inside; this only guards against a worker that hangs.
    const guard = r.timeoutMs ? setTimeout(() => finish(result(137, true)), r.timeoutMs + 5000) : undefined;
    // An abort closes the connection: the worker then kills the command, its group and what it left
    // (once the command has taken its stdin: until then the worker does not read the connection).
    const onAbort = () => finish(result(137, false));
    if (r.signal?.aborted) return onAbort();
    r.signal?.addEventListener('abort', onAbort, { once: true });
    const stdin = typeof r.stdin === 'string' ? Buffer.from(r.stdin) : r.stdin ? Buffer.from(r.stdin) : Buffer.alloc(0);
    const frames = [frame('R', payload)];
    for (let o = 0; o < stdin.length; o += MAX_CHUNK) frames.push(frame('i', stdin.subarray(o, o + MAX_CHUNK)));
    frames.push(frame('e', Buffer.alloc(0)));
    // A small request goes in one write (one read for the worker); a large stdin frame by frame.
    if (stdin.length <= MAX_CHUNK) s.write(Buffer.concat(frames));
    else for (const f of frames) s.write(f);
  });
}
