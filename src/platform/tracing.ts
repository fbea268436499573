// OpenTelemetry traces, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (read once, in config.ts).
//
// On: one tracer provider for the process (spans batched to the operator's OTLP/HTTP endpoint), a span
// per request named by its operation (a W3C `traceparent` from another nube node continues its trace),
// a span per job, and child spans for the metadata store, the database executors, the sandbox spawner,
// the outbound client and forwarding between nodes; `traceparent` goes out with forwarded requests and
// webhook deliveries. Off: every entry point below is a test of one boolean and a direct call, so an
// installation without traces pays nothing measurable (bench/api).
import { type Attributes, type Context, context, propagation, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

export interface TracingConfig {
  /** OTEL_EXPORTER_OTLP_ENDPOINT: the collector's base URL (spans go to <it>/v1/traces); unset: off. */
  endpoint?: string;
  /** OTEL_SERVICE_NAME (default `nube`). */
  serviceName: string;
}

let on = false;
let provider: Promise<NodeTracerProvider> | undefined;
let users = 0;
const tracer = () => trace.getTracer('nube');

/** Whether spans are recorded in this process. */
export function tracingOn(): boolean {
  return on;
}

/**
 * Starts exporting when configured. The provider is the process's (OpenTelemetry's API is global):
 * servers started in one process (tests) share it; the last one to stop flushes and ends it.
 */
export async function startTracing(config: TracingConfig, nodeId: string): Promise<{ stop(): Promise<void> }> {
  if (!config.endpoint) return { stop: async () => {} };
  const endpoint = config.endpoint;
  users++;
  // The SDK and its exporter (about 150 modules) are loaded only when traces are on.
  provider ??= (async () => {
    const [{ OTLPTraceExporter }, { resourceFromAttributes }, { BatchSpanProcessor, NodeTracerProvider }] = await Promise.all([
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace-node'),
    ]);
    const p = new NodeTracerProvider({
      resource: resourceFromAttributes({ 'service.name': config.serviceName, 'service.instance.id': nodeId }),
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/$/, '')}/v1/traces` }), { scheduledDelayMillis: 500 })],
    });
    p.register();
    on = true;
    return p;
  })();
  await provider;
  let stopped = false;
  return {
    async stop() {
      if (stopped) return;
      stopped = true;
      if (--users > 0 || !provider) return;
      const p = await provider;
      provider = undefined;
      on = false;
      await p.shutdown().catch(() => {});
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}

/** Runs `fn` in a child span of the current one (or of none): its errors mark the span and pass on. */
export function inSpan<T>(name: string, attributes: Attributes, fn: () => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  if (!on) return fn();
  return tracer().startActiveSpan(name, { kind, attributes }, async (span) => {
    try {
      return await fn();
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Sets `traceparent` (and `tracestate`) of the current span on outgoing headers; nothing when off. */
export function injectTraceContext(headers: Record<string, string | string[]>): void {
  if (!on) return;
  delete headers.traceparent;
  delete headers.tracestate;
  propagation.inject(context.active(), headers);
}

/** `headers` with the current span's `traceparent` added (a webhook delivery's): as they are when off. */
export function withTraceContext<H extends Record<string, string>>(headers: H): H {
  if (on) propagation.inject(context.active(), headers);
  return headers;
}

const SPAN = Symbol('nube.span');
const CONTEXT = Symbol('nube.trace-context');
type Traced = FastifyRequest & { [SPAN]?: Span; [CONTEXT]?: Context };

/**
 * A server span per request, active while its hooks and handler run (so the store, executor and
 * spawner spans under it are its children). A `traceparent` header continues that trace: another
 * node forwarding, or a client that traces its own calls.
 */
export function installRequestTracing(app: FastifyInstance, operationOf: (req: FastifyRequest) => string | undefined): void {
  if (!on) return;
  // A request forwarded to another node hijacks its reply (node-forward.ts): no onResponse runs, so
  // its span ends when the raw response does; whichever comes first ends it, once.
  const finish = (req: FastifyRequest, status: number) => {
    const span = (req as Traced)[SPAN];
    if (!span) return;
    (req as Traced)[SPAN] = undefined;
    const op = operationOf(req);
    if (op) {
      span.updateName(op);
      span.setAttribute('nube.operation', op);
    }
    span.setAttribute('http.response.status_code', status);
    if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  };
  app.addHook('onRequest', (req, reply, done) => {
    const parent = propagation.extract(context.active(), req.headers);
    const span = tracer().startSpan(
      `${req.method} ${req.routeOptions.url ?? 'unmatched'}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method, 'url.path': req.url.split('?')[0] } },
      parent,
    );
    const ctx = trace.setSpan(parent, span);
    (req as Traced)[SPAN] = span;
    (req as Traced)[CONTEXT] = ctx;
    reply.raw.once('close', () => finish(req, reply.raw.statusCode));
    context.with(ctx, done);
  });
  // A body is read in the socket's callbacks, outside that context: enter it again for the handler.
  app.addHook('preHandler', (req, _reply, done) => {
    const ctx = (req as Traced)[CONTEXT];
    if (ctx) context.with(ctx, done);
    else done();
  });
  app.addHook('onResponse', (req: FastifyRequest, reply: FastifyReply, done) => {
    finish(req, reply.statusCode);
    done();
  });
}

export { SpanKind };
