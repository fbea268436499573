import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';
import { notePrincipal, replayOriginOf } from './audit-context.js';
import { type Authenticator, CSRF_HEADER, CSRF_PROTOCOL_PREFIX, type CredentialSource, type Principal } from './auth.js';
import { boxSource } from './box-source.js';
import { type ErrorIssue, errors } from './errors.js';
import { jsonDepth, MAX_BODY_DEPTH, NUL_MESSAGE, nulPaths } from './json-limits.js';
import type { RateLimitSettings } from './config-shape.js';
import { type RateLimiter, type RateLimitResult, ruleFor } from './limits.js';
import type { OperationRouteConfig } from './metrics-http.js';
import { alreadyCounted, boxVouched, isRelayed, mayRelayAgain, type NodeForwarder } from './node-forward.js';
import { ElsewhereError, runPinned } from './nodes.js';
import {
  type AnyOperation,
  fastifyPath,
  type HttpMethod,
  type OpContext,
  RawResponse,
  type RateLimitRule,
  type Services,
} from './operation.js';
import { checkResource } from './scopes.js';
import { parseOr400 } from './validate.js';
import type { WorkspaceRegistry } from './workspaces.js';

export const API_PREFIX = '/api/v2';

export interface RestDeps {
  operations: AnyOperation[];
  auth: Authenticator;
  rateLimiter: RateLimiter;
  services: Services;
  defaultRateLimit: RateLimitRule;
  rateLimitSettings: RateLimitSettings;
  /** Relays a request whose work belongs on another node (ElsewhereError); absent: served here only. */
  forwarder?: NodeForwarder;
  /** The gate keeping workspace-scoped keys to their workspaces' resources. */
  workspaces?: WorkspaceRegistry;
}

/** Mounts every operation of the registry as a REST route under /api/v2. */
export function mountOperations(app: FastifyInstance, deps: RestDeps): void {
  for (const op of deps.operations) {
    for (const { method, path } of [{ method: op.method, path: op.path }, ...(op.aliases ?? [])]) {
      app.route({
        method,
        url: API_PREFIX + fastifyPath(path),
        config: { operationId: op.id } satisfies OperationRouteConfig,
        handler: (req, reply) => {
          const done = isRelayed(req) ? runPinned(() => runOperation(op, deps, req, reply)) : runOperation(op, deps, req, reply);
          // Work placed on (or held by) another node goes there over the internal channel.
          if (deps.forwarder && done instanceof Promise) {
            const fw = deps.forwarder;
            return done.catch((e: unknown) => {
              if (!(e instanceof ElsewhereError)) throw e;
              // A relayed request is relayed at most once more (its resource moved since the first node
              // looked it up); past that the nodes disagree, so answer and let the client retry.
              if (!mayRelayAgain(req)) throw errors.unavailable(`this resource is moving to node ${e.nodeId}; retry`, 1);
              return fw.forward(req, reply, e.nodeId, 'parsed');
            });
          }
          // Fastify treats a returned non-promise as a payload: a reply already sent returns nothing.
          return settled(done) ? undefined : done;
        },
      });
    }
  }
  installMethodNotAllowed(app, deps.operations);
}

/** A value or a promise of it: the hot path awaits only what is really asynchronous. */
type MaybePromise<T> = T | Promise<T>;
const settled = <T>(v: MaybePromise<T>): v is T => !(v instanceof Promise);

/**
 * The handler's context. A class, not an object literal with a getter: the literal's accessor cost about
 * 11 us per request under load (bench/api), a third of the whole request.
 */
class RequestContext {
  private controller: AbortController | undefined;
  constructor(
    readonly principal: Principal,
    readonly params: unknown,
    readonly query: unknown,
    readonly body: unknown,
    readonly services: Services,
    private readonly req: FastifyRequest,
    private readonly reply: FastifyReply,
  ) {}
  get log() {
    return this.req.log;
  }
  get requestId() {
    return this.req.id;
  }
  get headers() {
    return this.req.headers;
  }
  /**
   * Aborted when the client goes away before the answer is written. Made on first use: most handlers
   * never look at it and it costs a listener per request. It listens on the response: the request
   * emits 'close' as soon as its body has been read, which is not a disconnect.
   */
  get signal(): AbortSignal {
    if (!this.controller) {
      const c = new AbortController();
      this.controller = c;
      const res = this.reply.raw;
      const gone = () => {
        if (!res.writableFinished) c.abort();
      };
      // The client may be gone already, before the handler first looked.
      if (res.closed) gone();
      else res.once('close', gone);
    }
    return this.controller.signal;
  }
}

function runOperation(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply) {
  const query = (req.query ?? {}) as Record<string, unknown>;
  const principal = deps.auth.authenticate(credentialSource(deps.auth, req.raw, query, req.method !== 'GET' && req.method !== 'HEAD', isRelayed(req)), op.auth, { operation: op, ip: req.ip, box: boxOf(req), boxVouched: boxVouched(req.raw) });
  return settled(principal) ? limited(op, deps, req, reply, principal) : principal.then((p) => limited(op, deps, req, reply, p));
}

/** The bridge address a request came from through the box API, directly or as an MCP tool call's replay. */
function boxOf(req: FastifyRequest): string | undefined {
  return boxSource(req.raw) ?? replayOriginOf(req.headers)?.box;
}

/** The credentials a request to /api/v2 may carry, the console's session cookie included (with its CSRF facts). */
export function credentialSource(
  auth: Authenticator,
  req: IncomingMessage,
  query: Record<string, unknown>,
  stateChanging: boolean,
  relayed: boolean,
): CredentialSource {
  const headers = req.headers;
  return {
    authorization: headers.authorization,
    apiKey: headers['x-api-key'],
    queryToken: typeof query.token === 'string' ? query.token : undefined,
    cookie: headers.cookie,
    // Only a request with cookies needs the facts the cookie's checks read.
    request: headers.cookie ? cookieRequest(auth, req, stateChanging, relayed) : undefined,
  };
}

function cookieRequest(auth: Authenticator, req: IncomingMessage, stateChanging: boolean, relayed: boolean) {
  const headers = req.headers;
  const origin = auth.proxy.originOf(req, relayed);
  // A browser's WebSocket cannot set headers: the token then travels as a subprotocol.
  const protocols = String(headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
  const viaProtocol = protocols.find((p) => p.startsWith(CSRF_PROTOCOL_PREFIX))?.slice(CSRF_PROTOCOL_PREFIX.length);
  const header = headers[CSRF_HEADER];
  return {
    stateChanging,
    secure: origin.secure,
    host: origin.host,
    origin: headers.origin,
    secFetchSite: headers['sec-fetch-site'],
    csrf: (Array.isArray(header) ? header[0] : header) ?? viaProtocol,
  };
}

function limited(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply, principal: Principal) {
  notePrincipal(req, principal);
  if (alreadyCounted(req)) return handle(op, deps, req, reply, principal);
  const rule = ruleFor(op.rateLimit ?? deps.defaultRateLimit, deps.rateLimitSettings, principal.plan);
  const who = principal.ownerId || `ip:${req.ip}`;
  const rl = deps.rateLimiter.consume(`${who}:${op.id}`, rule);
  const go = (r: RateLimitResult) => {
    if (!r.allowed) throw errors.tooManyRequests(r.retryAfterSec);
    return handle(op, deps, req, reply, principal);
  };
  return settled(rl) ? go(rl) : rl.then(go);
}

function handle(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply, principal: Principal) {
  rejectNul(op, req);
  if (principal.scope) {
    checkResource(principal.scope, op, req.params as Record<string, unknown>);
    const gated = deps.workspaces?.gate(principal, op, req.params as Record<string, unknown>);
    if (gated) return gated.then(() => proceed(op, deps, req, reply, principal));
  }
  return proceed(op, deps, req, reply, principal);
}

function proceed(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply, principal: Principal) {
  const params = op.params ? parseOr400(op.params, req.params, 'params') : undefined;
  const parsedQuery = op.query ? parseOr400(op.query, req.query ?? {}, 'query') : undefined;
  let body: unknown;
  if (op.body) {
    const raw = req.body === undefined && op.bodyOptional ? {} : req.body;
    if (raw === undefined) throw errors.validation([{ path: ['body'], message: 'a JSON body is required' }]);
    body = parseOr400(op.body, raw, 'body');
  }
  if (!op.handler) throw errors.notImplemented(`${op.method} ${API_PREFIX}${op.path}`);
  const ctx = new RequestContext(principal, params, parsedQuery, body, deps.services, req, reply);
  const result: unknown = op.handler(ctx as OpContext<unknown, unknown, unknown>);
  return result instanceof Promise ? result.then((r) => respond(op, req, reply, r)) : respond(op, req, reply, result);
}

/** Set by the JSON parser when the body's text holds `\u0000`, the only way JSON can carry a NUL. */
const NUL_IN_BODY = Symbol('nulInBody');

/**
 * NUL (U+0000) is refused before validation, the same way on both stores (PostgreSQL text cannot hold
 * it): in a path parameter the id names nothing (404); in a query parameter or a body field it is a 400
 * with issues, except in the body fields an operation declares `anyText`.
 */
function rejectNul(op: AnyOperation, req: FastifyRequest): void {
  if (nulInParams(req)) throw errors.notFound();
  const issues: ErrorIssue[] = [];
  const query = req.query as Record<string, unknown> | undefined;
  if (query) for (const k in query) if (hasNul(k) || hasNul(query[k])) issues.push({ path: ['query', k], message: NUL_MESSAGE, code: 'nul_character' });
  if (op.body && op.anyText !== true && (req as unknown as Record<symbol, unknown>)[NUL_IN_BODY]) {
    for (const path of nulPaths(req.body)) {
      if (!op.anyText?.includes(String(path[0]))) issues.push({ path: ['body', ...path], message: NUL_MESSAGE, code: 'nul_character' });
    }
  }
  if (issues.length) throw errors.validation(issues);
}

function nulInParams(req: FastifyRequest): boolean {
  const params = req.params as Record<string, unknown> | undefined;
  if (params) for (const k in params) if (hasNul(params[k])) return true;
  return false;
}

/** The same rule for routes outside the registry that look ids up (an `onRequest` hook): 404. */
export function notFoundOnNulParams(req: FastifyRequest, reply: FastifyReply, done: () => void): void {
  if (!nulInParams(req)) {
    done();
    return;
  }
  const e = errors.notFound();
  void reply.code(e.status).send(e.toBody());
}

const hasNul = (v: unknown): boolean =>
  typeof v === 'string' ? v.includes('\u0000') : Array.isArray(v) && v.some((x) => typeof x === 'string' && x.includes('\u0000'));

/**
 * Request bodies are JSON and nothing else: any other content type, text/plain included (a JSON body
 * sent as text is a client bug that would otherwise surface as a confusing "expected object" 400), is a
 * 415. An empty body is "no body" (actions with optional fields accept it). Nesting past MAX_BODY_DEPTH
 * is a 400: it would overflow the stack wherever the value is serialized again.
 */
export function installBodyParsing(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return done(e as Error, undefined);
    }
    // Each level takes at least two characters, so a short text cannot be too deep.
    if (text.length > 2 * MAX_BODY_DEPTH && jsonDepth(value, MAX_BODY_DEPTH) > MAX_BODY_DEPTH) {
      return done(errors.validation([{ path: ['body'], message: `nested deeper than ${MAX_BODY_DEPTH} levels`, code: 'too_deep' }]), undefined);
    }
    if (text.includes('\\u0000')) (req as unknown as Record<symbol, unknown>)[NUL_IN_BODY] = true;
    done(null, value);
  });
}

function respond(op: AnyOperation, req: FastifyRequest, reply: FastifyReply, result: unknown) {
  if (result instanceof RawResponse) return sendRaw(reply, result);
  // Parsing the output strips fields the schema does not declare, so internals never leak.
  const out = op.response.safeParse(result);
  if (!out.success) {
    req.log.error({ op: op.id, issues: out.error.issues }, 'handler returned a value its response schema rejects');
    throw errors.internal();
  }
  return reply.code(op.successStatus ?? 200).send(out.data);
}

function sendRaw(reply: FastifyReply, r: RawResponse) {
  reply.code(r.status).header('content-type', r.contentType).headers(r.headers);
  const b = r.body;
  if (typeof b === 'string' || Buffer.isBuffer(b) || b instanceof Readable) return reply.send(b);
  return reply.send(Readable.from(b));
}

/** Fastify answers 404 for a known path with another method; the API promises 405 with Allow. */
function installMethodNotAllowed(app: FastifyInstance, ops: AnyOperation[]): void {
  const routes = ops.flatMap((op) =>
    [{ method: op.method, path: op.path }, ...(op.aliases ?? [])].map((r) => ({
      method: r.method,
      re: new RegExp(`^${API_PREFIX}${r.path.replace(/\{[A-Za-z0-9_]+\}/g, '[^/]+')}/?$`),
    })),
  );
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0]!;
    const allow = [...new Set(routes.filter((r) => r.re.test(path)).map((r) => r.method))] as HttpMethod[];
    const e = allow.length > 0 && !allow.includes(req.method as HttpMethod) ? errors.methodNotAllowed(allow) : errors.notFound('route');
    return reply.code(e.status).headers(e.headers).send(e.toBody());
  });
}
