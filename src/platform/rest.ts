import { Readable } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authenticator, Principal } from './auth.js';
import { ApiError, errors } from './errors.js';
import type { RateLimiter, RateLimitResult } from './limits.js';
import type { OperationRouteConfig } from './metrics-http.js';
import {
  type AnyOperation,
  fastifyPath,
  type HttpMethod,
  type OpContext,
  RawResponse,
  type RateLimitRule,
  type Services,
} from './operation.js';
import { parseOr400 } from './validate.js';

export const API_PREFIX = '/api/v2';

export interface RestDeps {
  operations: AnyOperation[];
  auth: Authenticator;
  rateLimiter: RateLimiter;
  services: Services;
  defaultRateLimit: RateLimitRule;
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
          const done = runOperation(op, deps, req, reply);
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
  const principal = deps.auth.authenticate(
    {
      authorization: req.headers.authorization,
      apiKey: req.headers['x-api-key'],
      queryToken: typeof query.token === 'string' ? query.token : undefined,
    },
    op.auth,
  );
  return settled(principal) ? limited(op, deps, req, reply, principal) : principal.then((p) => limited(op, deps, req, reply, p));
}

function limited(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply, principal: Principal) {
  const rule = op.rateLimit ?? deps.defaultRateLimit;
  const who = principal.ownerId || `ip:${req.ip}`;
  const rl = deps.rateLimiter.consume(`${who}:${op.id}`, rule);
  const go = (r: RateLimitResult) => {
    if (!r.allowed) throw errors.tooManyRequests(r.retryAfterSec);
    return handle(op, deps, req, reply, principal);
  };
  return settled(rl) ? go(rl) : rl.then(go);
}

function handle(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply, principal: Principal) {
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

/** Renders every failure as { error, code?, issues? } and never leaks internals of a 5xx. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | ApiError, req, reply) => {
    const e = toApiError(err);
    if (e.status >= 500 && e.status !== 501 && e.status !== 503) {
      req.log.error({ err, reqId: req.id }, 'unexpected error');
    }
    return reply.code(e.status).headers(e.headers).send(e.toBody());
  });
}

function toApiError(err: FastifyError | ApiError): ApiError {
  if (err instanceof ApiError) return err;
  const code = (err as FastifyError).code;
  const status = (err as FastifyError).statusCode;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE' || status === 413) return errors.payloadTooLarge();
  if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' || status === 415) return errors.unsupportedMediaType();
  if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err instanceof SyntaxError) {
    return errors.badRequest('malformed JSON body', [{ path: ['body'], message: err.message }], 'InvalidJson');
  }
  if (status && status >= 400 && status < 500) return new ApiError(status, code ?? 'BadRequest', err.message);
  return errors.internal();
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
