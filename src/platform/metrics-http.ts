// GET /metrics and the per-request histogram. Installed only when metrics are configured, so a nube
// without NUBE_METRICS_TOKEN / NUBE_METRICS_PUBLIC pays nothing per request.
import type { FastifyInstance, FastifyReply, FastifyRequest, onResponseHookHandler, RouteOptions } from 'fastify';
import type { MetricsConfig } from './config-shape.js';
import { safeEqual, sha256Hex } from './crypto.js';
import { ApiError } from './errors.js';
import type { Observer } from './fast-histogram.js';
import type { Metrics } from './metrics.js';

/** Route config key carrying the registry's operation id (set by platform/rest.ts). */
export interface OperationRouteConfig {
  operationId?: string;
}

// From a cached GET (~1 ms under load) to a long exec or a template build.
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60];
const CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'];

type Observe = (status: number, elapsedMs: number) => void;

const OPERATION = Symbol('nube.metrics.operation');
type Labelled = { [OPERATION]?: string };

/**
 * Names the operation of a request that a hook answers before any route runs (the sandbox port proxy
 * takes requests by Host in onRequest, whatever their path), so it is not counted under the route its
 * path happens to match.
 */
export function labelRequest(req: FastifyRequest, operation: string): void {
  (req as Labelled)[OPERATION] = operation;
}

/** A request's operation as metrics and traces name it: a hook's label, else the route's registry id. */
export function operationOf(req: FastifyRequest): string | undefined {
  return (req as Labelled)[OPERATION] ?? (req.routeOptions.config as OperationRouteConfig | undefined)?.operationId;
}

/**
 * Request counts and latencies: nube_http_request_duration_seconds{operation, status_class}. `operation`
 * is the registry id (`account.get`) or, for routes outside the registry, `METHOD /route` (`GET
 * /healthz`); requests no route matched are `unmatched`; a hook may name its own (labelRequest).
 * Each route gets its own onResponse hook bound to its label children when it is added, so a request
 * does no label lookup of its own (the hot path is ~26 us of CPU per request; docs/benchmarks.md, api,
 * has what this adds).
 * Must run before routes are added.
 */
export function installRequestMetrics(app: FastifyInstance, metrics: Metrics): void {
  const hist = metrics.fastHistogram(
    'nube_http_request_duration_seconds',
    'Time from request to response, by operation (registry id, or METHOD /route outside the registry) and status class',
    ['operation', 'status_class'],
    BUCKETS,
  );
  const observer = (operation: string): Observe => {
    const children: (Observer | undefined)[] = [];
    return (status, elapsedMs) => {
      const i = Math.floor(status / 100) - 1;
      const cls = CLASSES[i] ?? 'other';
      let child = children[i];
      if (!child) {
        child = hist.child({ operation, status_class: cls });
        children[i] = child;
      }
      child.observe(elapsedMs / 1000);
    };
  };
  const labelled = new Map<string, Observe>();
  const byLabel = (req: FastifyRequest): Observe | undefined => {
    const op = (req as Labelled)[OPERATION];
    if (op === undefined) return undefined;
    let o = labelled.get(op);
    if (!o) {
      o = observer(op);
      labelled.set(op, o);
    }
    return o;
  };
  app.addHook('onRoute', (route: RouteOptions) => {
    const id = (route.config as OperationRouteConfig | undefined)?.operationId;
    const method = Array.isArray(route.method) ? route.method.join(',') : route.method;
    const observe = observer(id ?? `${method} ${route.url}`);
    const hook: onResponseHookHandler = (req, reply, done) => {
      (byLabel(req) ?? observe)(reply.statusCode, reply.elapsedTime);
      done();
    };
    const own = route.onResponse;
    route.onResponse = own ? [...(Array.isArray(own) ? own : [own]), hook] : [hook];
  });
  // Requests no route matched have no route hook; this one only counts those (is404 reads one field).
  const unmatched = observer('unmatched');
  app.addHook('onResponse', (req: FastifyRequest, reply: FastifyReply, done) => {
    if (req.is404) (byLabel(req) ?? unmatched)(reply.statusCode, reply.elapsedTime);
    done();
  });
}

/** GET /metrics in Prometheus text format, behind the configured guard; absent when metrics are off. */
export function mountMetricsRoute(app: FastifyInstance, metrics: Metrics, config: MetricsConfig): void {
  if (config.mode === 'off') return;
  // Compared as digests: equal lengths, so the comparison leaks nothing about the token's length.
  const want = config.mode === 'token' ? sha256Hex(config.token) : undefined;
  app.get('/metrics', async (req, reply) => {
    if (want) {
      const m = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '');
      if (!m || !safeEqual(sha256Hex(m[1]!), want)) {
        throw new ApiError(401, 'Unauthorized', 'GET /metrics needs Authorization: Bearer <NUBE_METRICS_TOKEN>', {}, {
          'www-authenticate': 'Bearer realm="nube metrics"',
        });
      }
    }
    const text = await metrics.render();
    return reply.header('content-type', metrics.contentType).header('cache-control', 'no-store').send(text);
  });
}
