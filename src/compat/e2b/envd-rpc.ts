// The Connect RPC routes of envd: process.Process (streams for Start and Connect, unary for the rest)
// and filesystem.Filesystem (a stream for WatchDir, unary for the rest), on nube's root as envd serves
// them at the sandbox URL. The caller's user comes from `Authorization: Basic base64("<name>:")`.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { ConnectError, parseJson, readEnvelope, ServerStream, sendUnary, sendUnaryError, timeoutMs } from './connect-rpc.js';
import { absolute, type Filesystem } from './filesystem.js';
import { type Listener, type ProcessConfig, type Processes, VANISHED } from './processes.js';
import { basicUser, type E2bUser, type Users } from './users.js';
import type { Watcher } from './watch.js';

type Selector = { pid?: number; tag?: string };
type Json = Record<string, unknown>;

/** nube's errors as Connect codes (a missing sandbox stays not_found). */
export function toConnect(e: unknown): ConnectError | null {
  if (e instanceof ConnectError) return e;
  if (!(e instanceof ApiError)) return null;
  const byStatus: Record<number, ConnectError['code']> = {
    400: 'invalid_argument',
    401: 'unauthenticated',
    403: 'permission_denied',
    404: 'not_found',
    409: 'failed_precondition',
    429: 'resource_exhausted',
    501: 'unimplemented',
    503: 'unavailable',
  };
  return new ConnectError(byStatus[e.status] ?? 'internal', e.message);
}

function processConfig(raw: unknown, home: string): ProcessConfig {
  const c = (raw ?? {}) as Json;
  if (typeof c.cmd !== 'string' || c.cmd === '') throw new ConnectError('invalid_argument', 'process.cmd is required');
  const args = Array.isArray(c.args) ? c.args.map(String) : [];
  const envs: Record<string, string> = {};
  for (const [k, v] of Object.entries((c.envs ?? {}) as Json)) envs[k] = String(v);
  return { cmd: c.cmd, args, envs, ...(typeof c.cwd === 'string' && c.cwd ? { cwd: absolute(c.cwd, home) } : {}) };
}

function selector(raw: unknown): Selector | undefined {
  const s = ((raw ?? {}) as Json).selector ?? raw;
  const o = (s ?? {}) as Json;
  if (o.pid !== undefined) return { pid: Number(o.pid) };
  if (typeof o.tag === 'string') return { tag: o.tag };
  return undefined;
}

function bytes(raw: unknown): Buffer {
  return typeof raw === 'string' ? Buffer.from(raw, 'base64') : Buffer.alloc(0);
}

/** A PTY's size ({size: {cols, rows}}), or undefined when there is none. */
function ptySize(raw: unknown): { rows: number; cols: number } | undefined {
  if (raw === undefined || raw === null) return undefined;
  const size = ((raw as Json).size ?? {}) as Json;
  const rows = Number(size.rows ?? 24);
  const cols = Number(size.cols ?? 80);
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1 || rows > 1000 || cols > 1000) {
    throw new ConnectError('invalid_argument', 'pty.size needs whole rows and cols from 1 to 1000');
  }
  return { rows, cols };
}

/** proto3 JSON gives enums by name; numbers are accepted too. */
function signalNumber(raw: unknown): number {
  if (raw === 'SIGNAL_SIGTERM' || raw === 15) return 15;
  if (raw === 'SIGNAL_SIGKILL' || raw === 9) return 9;
  throw new ConnectError('invalid_argument', 'signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM');
}

export class EnvdRpc {
  constructor(
    private readonly processes: Processes,
    private readonly fs: Filesystem,
    private readonly watcher: Watcher,
    private readonly users: Users,
    private readonly log: { error(o: object, m: string): void },
  ) {}

  private internal(e: unknown): ConnectError {
    const c = toConnect(e);
    if (c) return c;
    this.log.error({ err: e }, 'e2b adapter: unexpected error');
    return new ConnectError('internal', 'internal error');
  }

  private user(p: Principal, id: string, req: FastifyRequest): Promise<E2bUser> {
    return this.users.resolve(p, id, basicUser(req.headers.authorization));
  }

  async unary(service: 'process' | 'filesystem', method: string, p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) {
    reply.hijack();
    try {
      const body = parseJson(req.body as Buffer | undefined) as Json;
      const answer =
        service === 'filesystem' ? await this.fs.call(p, id, await this.user(p, id, req), method, body) : this.processCall(method, id, body);
      sendUnary(reply.raw, answer);
    } catch (e) {
      sendUnaryError(reply.raw, this.internal(e));
    }
  }

  private processCall(method: string, id: string, body: Json): unknown {
    switch (method) {
      case 'List':
        return { processes: this.processes.list(id) };
      case 'SendInput': {
        const input = (body.input ?? {}) as Json;
        this.processes.sendInput(id, selector(body.process), input.pty !== undefined ? { pty: bytes(input.pty) } : { stdin: bytes(input.stdin) });
        return {};
      }
      case 'SendSignal':
        this.processes.signal(id, selector(body.process), signalNumber(body.signal));
        return {};
      case 'CloseStdin':
        this.processes.closeStdin(id, selector(body.process));
        return {};
      case 'Update': {
        const size = ptySize(body.pty);
        if (size) this.processes.resize(id, selector(body.process), size);
        return {};
      }
      default:
        throw new ConnectError('unimplemented', `process.Process/${method} is not implemented on nube`);
    }
  }

  /** Start, Connect and WatchDir: server streams. */
  async stream(method: string, p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) {
    reply.hijack();
    const out = new ServerStream(reply.raw);
    const every = Number(req.headers['keepalive-ping-interval']);
    const keepalive = method === 'WatchDir' ? { keepalive: {} } : { event: { keepalive: {} } };
    const ping = every > 0 ? setInterval(() => out.send(keepalive), every * 1000) : undefined;
    const closed = new AbortController();
    reply.raw.on('close', () => closed.abort());
    try {
      const body = readEnvelope(req.body as Buffer) as Json;
      const deadline = timeoutMs(req.headers['connect-timeout-ms']);
      if (method === 'Start') await this.start(p, id, body, deadline, req, out, closed.signal);
      else if (method === 'Connect') await this.connect(id, body, out, closed.signal);
      else if (method === 'WatchDir') await this.watch(p, id, body, deadline, req, out, closed.signal);
      else throw new ConnectError('unimplemented', `${method} is not implemented on nube`);
    } catch (e) {
      out.end(this.internal(e));
    } finally {
      if (ping) clearInterval(ping);
    }
  }

  private async start(p: Principal, id: string, body: Json, deadline: number | undefined, req: FastifyRequest, out: ServerStream, closed: AbortSignal) {
    const user = await this.user(p, id, req);
    let pid = -1;
    const listener: Listener = (msg) => {
      if (msg === VANISHED) return;
      const start = (msg as { event?: { start?: { pid: number } } }).event?.start;
      if (start) pid = start.pid;
      out.send(msg);
    };
    closed.addEventListener('abort', () => this.processes.detach(id, pid, listener));
    const r = await this.processes.start(
      p,
      id,
      {
        process: processConfig(body.process, user.home),
        tag: typeof body.tag === 'string' ? body.tag : undefined,
        stdin: body.stdin === true,
        pty: ptySize(body.pty),
        timeoutMs: deadline,
        user,
      },
      listener,
    );
    // The sandbox went away under the command: the stream drops, as envd's does with its VM.
    if ('vanished' in r) return out.drop();
    out.end(r.timedOut ? new ConnectError('deadline_exceeded', `the command ran over ${deadline} ms and was killed`) : undefined);
  }

  private async connect(id: string, body: Json, out: ServerStream, closed: AbortSignal) {
    await new Promise<void>((resolve) => {
      const listener: Listener = (msg) => {
        if (msg === VANISHED) {
          out.drop();
          resolve();
          return;
        }
        out.send(msg);
        if ((msg as { event?: { end?: unknown } }).event?.end) resolve();
      };
      const detach = this.processes.attach(id, selector(body.process), listener);
      closed.addEventListener('abort', () => {
        detach();
        resolve();
      });
    });
    out.end();
  }

  private async watch(p: Principal, id: string, body: Json, deadline: number | undefined, req: FastifyRequest, out: ServerStream, closed: AbortSignal) {
    const user = await this.user(p, id, req);
    const timedOut = await this.watcher.watch(
      p,
      id,
      { path: absolute(body.path, user.home), recursive: body.recursive === true, includeEntry: body.includeEntry === true, timeoutMs: deadline, user },
      closed,
      () => out.send({ start: {} }),
      (filesystem) => out.send({ filesystem }),
    );
    out.end(timedOut ? new ConnectError('deadline_exceeded', `the watch ran for ${deadline} ms`) : undefined);
  }
}
