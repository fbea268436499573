import { Readable } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authenticator } from './auth.js';
import { ApiError, errors } from './errors.js';
import type { RateLimiter } from './limits.js';
import {
  type AnyOperation,
  fastifyPath,
  type HttpMethod,
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
        handler: (req, reply) => runOperation(op, deps, req, reply),
      });
    }
  }
  installMethodNotAllowed(app, deps.operations);
}

async function runOperation(op: AnyOperation, deps: RestDeps, req: FastifyRequest, reply: FastifyReply) {
  const query = (req.query ?? {}) as Record<string, unknown>;
  const principal = await deps.auth.authenticate(
    {
      authorization: req.headers.authorization,
      apiKey: req.headers['x-api-key'],
      queryToken: typeof query.token === 'string' ? query.token : undefined,
    },
    op.auth,
  );
  const rule = op.rateLimit ?? deps.defaultRateLimit;
  const who = principal.ownerId || `ip:${req.ip}`;
  const rl = await deps.rateLimiter.consume(`${who}:${op.id}`, rule);
  if (!rl.allowed) throw errors.tooManyRequests(rl.retryAfterSec);

  const params = op.params ? parseOr400(op.params, req.params, 'params') : undefined;
  const parsedQuery = op.query ? parseOr400(op.query, query, 'query') : undefined;
  let body: unknown;
  if (op.body) {
    const raw = req.body === undefined && op.bodyOptional ? {} : req.body;
    if (raw === undefined) throw errors.validation([{ path: ['body'], message: 'a JSON body is required' }]);
    body = parseOr400(op.body, raw, 'body');
  }
  if (!op.handler) throw errors.notImplemented(`${op.method} ${API_PREFIX}${op.path}`);

  let controller: AbortController | undefined;
  const result = await op.handler({
    principal,
    params,
    query: parsedQuery,
    body,
    services: deps.services,
    log: req.log,
    requestId: req.id,
    // Made on first use: most handlers never look at it and it costs a listener per request.
    get signal() {
      if (!controller) {
        const c = new AbortController();
        controller = c;
        req.raw.once('close', () => {
          if (!reply.raw.writableFinished) c.abort();
        });
      }
      return controller.signal;
    },
    headers: req.headers,
  });
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
