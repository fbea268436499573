// Registry operations that are WebSockets (`websocket` in their spec): the HTTP upgrade of their path
// runs the same steps as a REST call (credential, CSRF for the console cookie, rate limit, params and
// query validation), answering an error as a plain HTTP response, then hands the socket to the operation.
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { WebSocketServer } from 'ws';
import { ApiError, errors } from './errors.js';
import { ruleFor } from './limits.js';
import { type AnyOperation, type OpContext, pathParamNames } from './operation.js';
import { isRelayed } from './node-forward.js';
import { API_PREFIX, credentialSource, type RestDeps } from './rest.js';
import { checkResource } from './scopes.js';
import { parseOr400 } from './validate.js';

/** Upgrades a WebSocket operation took; other upgrade listeners (agents' ACP socket) leave these alone. */
export const claimedUpgrades = new WeakSet<IncomingMessage>();

interface Route {
  op: AnyOperation;
  re: RegExp;
  names: string[];
}

function refuse(socket: Socket, e: ApiError): void {
  const body = JSON.stringify(e.toBody());
  const extra = Object.entries(e.headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.end(
    `HTTP/1.1 ${e.status} ${e.code}\r\nconnection: close\r\ncontent-type: application/json\r\n${extra}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

export function mountWebSockets(app: FastifyInstance, deps: RestDeps): void {
  const routes: Route[] = deps.operations
    .filter((op) => op.websocket)
    .map((op) => ({
      op,
      names: pathParamNames(op.path),
      re: new RegExp(`^${API_PREFIX}${op.path.replace(/\{[A-Za-z0-9_]+\}/g, '([^/]+)')}/?$`),
    }));
  if (routes.length === 0) return;
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024, perMessageDeflate: false });
  const sockets = new Set<import('ws').WebSocket>();
  app.addHook('onClose', async () => {
    for (const ws of sockets) ws.terminate();
    wss.close();
  });
  app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const route = routes.find((r) => r.re.test(url.pathname));
    if (!route) return;
    claimedUpgrades.add(req);
    const m = route.re.exec(url.pathname)!;
    socket.on('error', () => socket.destroy());
    (async () => {
      const query: Record<string, string> = {};
      for (const [k, v] of url.searchParams) query[k] = v;
      const { op } = route;
      const principal = await deps.auth.authenticate(credentialSource(deps.auth, req, query, true, isRelayed(req)), op.auth, { operation: op, ip: socket.remoteAddress });
      const r = await deps.rateLimiter.consume(`${principal.ownerId || `ip:${socket.remoteAddress}`}:${op.id}`, ruleFor(op.rateLimit ?? deps.defaultRateLimit, deps.rateLimitSettings, principal.plan));
      if (!r.allowed) throw errors.tooManyRequests(r.retryAfterSec);
      const raw: Record<string, string> = {};
      route.names.forEach((n, i) => {
        raw[n] = decodeURIComponent(m[i + 1]!);
      });
      if (Object.values(raw).some((v) => v.includes('\u0000'))) throw errors.notFound();
      if (principal.scope) checkResource(principal.scope, op, raw);
      if (principal.scope) await deps.workspaces?.gate(principal, op, raw);
      const params = op.params ? parseOr400(op.params, raw, 'params') : undefined;
      const parsedQuery = op.query ? parseOr400(op.query, query, 'query') : undefined;
      const controller = new AbortController();
      socket.once('close', () => controller.abort());
      const ctx: OpContext<unknown, unknown, undefined> = {
        principal,
        params,
        query: parsedQuery,
        body: undefined,
        services: deps.services,
        log: app.log,
        requestId: String(req.headers['x-request-id'] ?? ''),
        signal: controller.signal,
        headers: req.headers,
      };
      const start = await op.websocket!(ctx);
      if (socket.destroyed) return;
      wss.handleUpgrade(req, socket, head, (ws) => {
        sockets.add(ws);
        ws.once('close', () => sockets.delete(ws));
        start(ws);
      });
    })().catch((e: unknown) => {
      if (e instanceof ApiError) refuse(socket, e);
      else {
        app.log.error({ err: e, op: route.op.id }, 'websocket operation failed before the upgrade');
        refuse(socket, errors.internal());
      }
    });
  });
}
