// The port proxy: a request whose Host is `<port>-<sandbox id>.<public host>` goes to that port on the
// sandbox's bridge address, for exposed ports only. Plain node:http/net: HTTP is piped both ways (no
// buffering), a WebSocket upgrade becomes a raw TCP splice after the upstream's 101.
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { labelRequest } from '../../platform/metrics-http.js';
import type { SandboxDomains } from './networking/domains.js';
import type { Match } from './proxy-match.js';
import type { SandboxesCore } from './service.js';

export interface Target {
  address: string;
  port: number;
  /** The request woke the sandbox: its server may need a moment (bootstrap) to listen again. */
  woke: boolean;
}

const WAKE_RETRY_MS = 10_000;
const BODYLESS = new Set(['GET', 'HEAD', 'OPTIONS']);

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class PortProxy {
  private readonly hostRe: RegExp;

  constructor(
    private readonly core: SandboxesCore,
    private readonly domains?: SandboxDomains,
  ) {
    const host = escapeRe(core.deps.config.sandboxes.publicHost);
    // The id may come as `sbx_...` (as the API spells it) or `sbx-...` (strict DNS labels).
    this.hostRe = new RegExp(`^(\\d{1,5})-(sbx[_-][a-z0-9]{1,40})\\.${host}(?::\\d+)?$`, 'i');
  }

  /**
   * Sandbox id and port when the Host names a sandbox port or a verified custom domain, else null (a
   * normal API request). A domain's port needs no `expose`: verifying the domain was the consent.
   */
  match(hostHeader: string | undefined): Match | null {
    const m = hostHeader ? this.hostRe.exec(hostHeader) : null;
    if (!m) return this.domains?.route(hostHeader) ?? null;
    return { port: Number(m[1]), id: m[2]!.toLowerCase().replace('-', '_') };
  }

  /** A match's target (a machine's domain is looked up: its app's port can change). */
  private async target(m: Match): Promise<Target | { status: number; error: string }> {
    if (!('via' in m)) return this.resolve(m.id, m.port, m.domain);
    const t = await m.via;
    return t ? this.resolve(t.sandboxId, t.port, true) : { status: 404, error: 'nothing is served at this domain' };
  }

  /** Where to send the request, or a status to answer (404: no such sandbox or port not exposed). */
  async resolve(id: string, port: number, domain = false): Promise<Target | { status: number; error: string }> {
    let row = await this.core.repo.get(id);
    if (!row || (!domain && !(JSON.parse(row.exposed_ports) as number[]).includes(port))) {
      return { status: 404, error: 'no exposed port here' };
    }
    try {
      // Traffic is activity: a suspended sandbox wakes, the idle clock re-arms.
      const woke = row.status !== 'running';
      row = await this.core.ensureRunning(row);
      await this.core.clocks.touch(row);
      return { address: await this.core.runtime.addressOf(row.runtime_id), port, woke };
    } catch (e) {
      this.core.deps.log.warn({ err: e, sandbox: id }, 'proxy could not reach sandbox');
      return { status: 503, error: 'sandbox not available' };
    }
  }

  install(app: FastifyInstance): void {
    // A callback hook, not an async one: every API request passes here, and only port hosts wait.
    app.addHook('onRequest', (req, reply, done) => {
      const m = this.match(req.headers.host);
      if (!m) return done();
      labelRequest(req, 'sandboxes.proxy');
      this.target(m).then(
        (target) => {
          if ('status' in target) {
            reply.code(target.status).send({ error: target.error, code: target.status === 404 ? 'NotFound' : 'Unavailable' });
            return;
          }
          reply.hijack();
          this.forwardHttp(req.raw, reply.raw, target);
        },
        (err: Error) => done(err),
      );
    });
    app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const m = this.match(req.headers.host);
      if (!m) {
        // API upgrades (an agent's ACP WebSocket) are the agents area's; nothing else takes upgrades.
        if (req.url?.startsWith('/api/')) return;
        socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      this.target(m).then(
        (t) => {
          if ('status' in t) {
            socket.end(`HTTP/1.1 ${t.status} ${t.error}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
          } else this.forwardUpgrade(req, socket, head, t);
        },
        () => socket.destroy(),
      );
    });
  }

  private forwardHttp(req: IncomingMessage, res: import('node:http').ServerResponse, t: Target, retryUntil = 0): void {
    if (t.woke && retryUntil === 0 && BODYLESS.has(req.method ?? '')) retryUntil = Date.now() + WAKE_RETRY_MS;
    const tls = 'encrypted' in req.socket && req.socket.encrypted === true;
    const headers = { ...req.headers, 'x-forwarded-host': req.headers.host, 'x-forwarded-for': req.socket.remoteAddress, 'x-forwarded-proto': tls ? 'https' : 'http' };
    const up = httpRequest(
      { host: t.address, port: t.port, method: req.method, path: req.url, headers, timeout: 60_000 },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, upRes.rawHeaders);
        upRes.pipe(res);
      },
    );
    up.on('timeout', () => up.destroy(new Error('upstream timeout')));
    up.on('error', (e: NodeJS.ErrnoException) => {
      // Right after a wake nothing listens yet: a bodyless request waits for the server to come up.
      if (e.code === 'ECONNREFUSED' && Date.now() < retryUntil && !res.headersSent) {
        res.off('close', onClose);
        setTimeout(() => this.forwardHttp(req, res, t, retryUntil), 100);
        return;
      }
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: 'the sandbox port did not answer', code: 'BadGateway' }));
      } else res.destroy();
    });
    const onClose = () => up.destroy();
    res.once('close', onClose);
    if (BODYLESS.has(req.method ?? '')) up.end();
    else req.pipe(up);
  }

  private forwardUpgrade(req: IncomingMessage, client: Socket, head: Buffer, t: Target): void {
    const up = connect(t.port, t.address, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length) up.write(head);
      up.pipe(client);
      client.pipe(up);
    });
    const close = () => {
      up.destroy();
      client.destroy();
    };
    up.on('error', () => {
      if (!client.writableEnded) client.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      close();
    });
    client.on('error', close);
    up.on('close', close);
    client.on('close', close);
  }
}
