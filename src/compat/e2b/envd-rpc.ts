// The Connect RPC routes of envd: process.Process (streams for Start and Connect) and
// filesystem.Filesystem (unary), on nube's root as envd serves them at the sandbox URL.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { ConnectError, parseJson, readEnvelope, ServerStream, sendUnary, sendUnaryError, timeoutMs } from './connect-rpc.js';
import type { Filesystem } from './filesystem.js';
import type { Processes, ProcessConfig } from './processes.js';

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

function processConfig(raw: unknown): ProcessConfig {
  const c = (raw ?? {}) as Json;
  if (typeof c.cmd !== 'string' || c.cmd === '') throw new ConnectError('invalid_argument', 'process.cmd is required');
  const args = Array.isArray(c.args) ? c.args.map(String) : [];
  const envs: Record<string, string> = {};
  for (const [k, v] of Object.entries((c.envs ?? {}) as Json)) envs[k] = String(v);
  return { cmd: c.cmd, args, envs, ...(typeof c.cwd === 'string' && c.cwd ? { cwd: c.cwd } : {}) };
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

export class EnvdRpc {
  constructor(
    private readonly processes: Processes,
    private readonly fs: Filesystem,
    private readonly log: { error(o: object, m: string): void },
  ) {}

  private internal(e: unknown): ConnectError {
    const c = toConnect(e);
    if (c) return c;
    this.log.error({ err: e }, 'e2b adapter: unexpected error');
    return new ConnectError('internal', 'internal error');
  }

  async unary(service: 'process' | 'filesystem', method: string, p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) {
    reply.hijack();
    try {
      const body = parseJson(req.body as Buffer | undefined) as Json;
      sendUnary(reply.raw, service === 'filesystem' ? await this.fs.call(p, id, method, body) : await this.processCall(method, p, id, body));
    } catch (e) {
      sendUnaryError(reply.raw, this.internal(e));
    }
  }

  private async processCall(method: string, p: Principal, id: string, body: Json): Promise<unknown> {
    switch (method) {
      case 'List':
        return { processes: this.processes.list(id) };
      case 'SendInput': {
        const input = (body.input ?? {}) as Json;
        if (input.pty !== undefined) throw new ConnectError('unimplemented', 'PTY input is not supported on nube');
        await this.processes.sendInput(p, id, selector(body.process), bytes(input.stdin));
        return {};
      }
      case 'SendSignal':
        this.processes.kill(id, selector(body.process));
        return {};
      default:
        throw new ConnectError('unimplemented', `process.Process/${method} is not implemented on nube`);
    }
  }

  /** Start and Connect: server streams of ProcessEvent messages. */
  async stream(method: string, p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) {
    reply.hijack();
    const out = new ServerStream(reply.raw);
    const send = (msg: unknown) => out.send(msg);
    const every = Number(req.headers['keepalive-ping-interval']);
    const ping = every > 0 ? setInterval(() => send({ event: { keepalive: {} } }), every * 1000) : undefined;
    let detach = () => {};
    reply.raw.on('close', () => {
      if (ping) clearInterval(ping);
      detach();
    });
    try {
      const body = readEnvelope(req.body as Buffer) as Json;
      if (method === 'Start') {
        if (body.pty !== undefined && body.pty !== null) throw new ConnectError('unimplemented', 'PTY is not supported on nube');
        const deadline = timeoutMs(req.headers['connect-timeout-ms']);
        let pid = -1;
        const listener = (msg: unknown) => {
          const start = (msg as { event?: { start?: { pid: number } } }).event?.start;
          if (start) pid = start.pid;
          send(msg);
        };
        detach = () => this.processes.detach(id, pid, listener);
        const r = await this.processes.start(
          p,
          id,
          { process: processConfig(body.process), tag: typeof body.tag === 'string' ? body.tag : undefined, stdin: body.stdin === true, timeoutMs: deadline },
          listener,
        );
        out.end(r.timedOut ? new ConnectError('deadline_exceeded', `the command ran over ${deadline} ms and was killed`) : undefined);
      } else if (method === 'Connect') {
        await new Promise<void>((resolve) => {
          const listener = (msg: unknown) => {
            send(msg);
            if ((msg as { event?: { end?: unknown } }).event?.end) resolve();
          };
          detach = this.processes.attach(id, selector(body.process), listener);
          reply.raw.on('close', () => resolve());
        });
        out.end();
      } else throw new ConnectError('unimplemented', `process.Process/${method} is not implemented on nube`);
    } catch (e) {
      out.end(this.internal(e));
    } finally {
      if (ping) clearInterval(ping);
    }
  }
}
