// The port proxy: a request whose Host is `<port>-<sandbox id>.<public host>` goes to that port on the
// sandbox's bridge address, for exposed ports only. Plain node:http/net: HTTP is piped both ways (no
// buffering), a WebSocket upgrade becomes a raw TCP splice after the upstream's 101.
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { labelRequest } from '../../platform/metrics-http.js';
import { claimedUpgrades } from '../../platform/websocket.js';
import type { SandboxDomains } from './networking/domains.js';
import type { Match } from './proxy-match.js';
import type { SandboxesCore } from './service.js';

export interface Target {
  /** The sandbox (its area may say why its port does not answer). */
  id: string;
  address: string;
  port: number;
  /** The request woke the sandbox: its server may need a moment (bootstrap) to listen again. */
  woke: boolean;
}

/**
 * Why a sandbox's port does not answer, in words, from the area that runs something there (a machine's
 * app crashing, killed for memory, still starting); null when it has nothing to say.
 */
export type PortExplainer = (sandboxId: string, port: number) => Promise<PortTrouble | null>;
export interface PortTrouble {
  /** A short state (`crashing`, `oom`, `starting`...). */
  status: string;
  message: string;
}

const WAKE_RETRY_MS = 10_000;
/** The 502 waits at most this long for the explanation, then answers without it. */
const EXPLAIN_MS = 3000;

/**
 * Set on a request (by a hook that runs before the proxy: E2B's `maskRequestHost`), the Host header the
 * sandbox's server sees instead of the port host it was asked for.
 */
export const UPSTREAM_HOST = Symbol.for('nube.proxy.upstreamHost');
type Masked = IncomingMessage & { [UPSTREAM_HOST]?: string };
const BODYLESS = new Set(['GET', 'HEAD', 'OPTIONS']);

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class PortProxy {
  private readonly hostRe: RegExp;

  constructor(
    private readonly core: SandboxesCore,
    private readonly domains?: SandboxDomains,
    private readonly explainers: PortExplainer[] = [],
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
    return t
      ? this.resolve(t.sandboxId, t.port, true)
      : { status: 404, error: 'nothing is served at this domain' };
  }

  /** Where to send the request, or a status to answer (404: no such sandbox or port not exposed). */
  async resolve(
    id: string,
    port: number,
    domain = false,
  ): Promise<Target | { status: number; error: string }> {
    let row = await this.core.repo.get(id);
    if (!row || (!domain && !(JSON.parse(row.exposed_ports) as number[]).includes(port))) {
      return { status: 404, error: 'no exposed port here' };
    }
    try {
      // Traffic is activity: a suspended sandbox wakes, the idle clock re-arms.
      const woke = row.status !== 'running';
      row = await this.core.ensureRunning(row);
      await this.core.clocks.touch(row);
      return { id, address: await this.core.runtime.addressOf(row.runtime_id), port, woke };
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
            reply
              .code(target.status)
              .send({ error: target.error, code: target.status === 404 ? 'NotFound' : 'Unavailable' });
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
        // API upgrades (an agent's ACP WebSocket) are the agents area's; others may be claimed by
        // another area's listener (libSQL over WebSocket), called in the same turn: 404 otherwise.
        if (req.url?.startsWith('/api/')) return;
        queueMicrotask(() => {
          if (!claimedUpgrades.has(req))
            socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        });
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

  private forwardHttp(
    req: IncomingMessage,
    res: import('node:http').ServerResponse,
    t: Target,
    retryUntil = 0,
  ): void {
    if (t.woke && retryUntil === 0 && BODYLESS.has(req.method ?? '')) retryUntil = Date.now() + WAKE_RETRY_MS;
    const tls = 'encrypted' in req.socket && req.socket.encrypted === true;
    // `Host` spelled as servers write it (Node sends a header as it is keyed); the rest as they came.
    const { host, ...rest } = req.headers;
    const headers = {
      Host: (req as Masked)[UPSTREAM_HOST] ?? host,
      ...rest,
      'x-forwarded-host': req.headers.host,
      'x-forwarded-for': req.socket.remoteAddress,
      'x-forwarded-proto': tls ? 'https' : 'http',
    };
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
      if (!res.headersSent) void this.badGateway(req, res, t);
      else res.destroy();
    });
    const onClose = () => up.destroy();
    res.once('close', onClose);
    if (BODYLESS.has(req.method ?? '')) up.end();
    else req.pipe(up);
  }

  /** 502, saying why when the sandbox's area knows (a machine's app crashing, out of memory, starting). */
  private async badGateway(
    req: IncomingMessage,
    res: import('node:http').ServerResponse,
    t: Target,
  ): Promise<void> {
    const trouble = await this.explain(t.id, t.port);
    if (res.headersSent || res.destroyed) return;
    const message = trouble?.message ?? 'the sandbox port did not answer';
    const status = trouble?.status ?? null;
    const headers: Record<string, string> = status ? { 'x-nube-app-status': status } : {};
    if (/\btext\/html\b/.test(String(req.headers.accept ?? ''))) {
      res.writeHead(502, { ...headers, 'content-type': 'text/html; charset=utf-8' });
      res.end(badGatewayPage(message, status));
      return;
    }
    res.writeHead(502, { ...headers, 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: message, code: 'BadGateway', ...(status ? { status } : {}) }));
  }

  private async explain(id: string, port: number): Promise<PortTrouble | null> {
    for (const explain of this.explainers) {
      const found = await Promise.race([
        explain(id, port).catch((e: unknown) => {
          this.core.deps.log.warn({ err: e, sandbox: id }, 'could not say why the port does not answer');
          return null;
        }),
        new Promise<null>((r) => setTimeout(() => r(null), EXPLAIN_MS).unref()),
      ]);
      if (found) return found;
    }
    return null;
  }

  private forwardUpgrade(req: IncomingMessage, client: Socket, head: Buffer, t: Target): void {
    const up = connect(t.port, t.address, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      const masked = (req as Masked)[UPSTREAM_HOST];
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const host = masked !== undefined && req.rawHeaders[i]!.toLowerCase() === 'host';
        lines.push(`${req.rawHeaders[i]}: ${host ? masked : req.rawHeaders[i + 1]}`);
      }
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
      if (!client.writableEnded)
        client.end('HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      close();
    });
    client.on('error', close);
    up.on('close', close);
    client.on('close', close);
  }
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The page a browser gets for a 502: what is wrong, in words, and the state it comes from. */
function badGatewayPage(message: string, status: string | null): string {
  const state = status ? `<p>Status: <code>${escapeHtml(status)}</code></p>` : '';
  return `<!doctype html><html><head><meta charset="utf-8"><title>502: not answering</title></head><body style="font-family:sans-serif;max-width:40em;margin:4em auto"><h1>502: the app is not answering</h1><p>${escapeHtml(message)}</p>${state}</body></html>\n`;
}

/**
 * One HTTP request to a sandbox port on nube's bridge (a health check): the status it answered, or why
 * it did not (refused, timed out, not HTTP). Any answer within `timeoutMs` counts as an answer.
 */
export function probeHttp(
  address: string,
  port: number,
  path: string,
  timeoutMs: number,
): Promise<{ status: number } | { error: string }> {
  return new Promise((resolve) => {
    const req = httpRequest(
      {
        host: address,
        port,
        path,
        method: 'GET',
        agent: false,
        timeout: timeoutMs,
        headers: { 'user-agent': 'nube-health-check', connection: 'close' },
      },
      (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0 });
        req.destroy();
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (e: NodeJS.ErrnoException) =>
      resolve({ error: e.code === 'ECONNREFUSED' ? 'nothing listens on the port' : e.message }),
    );
    req.end();
  });
}
