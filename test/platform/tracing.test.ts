import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tracingOn } from '../../src/platform/tracing.js';
import { attr, type OtlpSpan, receiver } from '../helpers/otlp-receiver.js';
import { callJson, startNube } from '../helpers/server.js';
import { FAST, until } from '../webhooks/helpers.js';

// OpenTelemetry traces against a local OTLP/HTTP receiver (JSON, what @opentelemetry's http exporter
// posts to <endpoint>/v1/traces), written from the OTLP specification: a request's span continues the
// caller's traceparent, the store and the database executor are its children, a webhook delivery
// carries the traceparent of the job that sent it; without the setting nothing is exported.

describe('traces (OTEL_EXPORTER_OTLP_ENDPOINT)', () => {
  let otlp: Awaited<ReturnType<typeof receiver>>;
  beforeAll(async () => {
    otlp = await receiver();
  });
  afterAll(() => new Promise<void>((r) => otlp.server.close(() => r())));

  it('without the setting nothing is traced or sent', async () => {
    const t = await startNube();
    try {
      expect(tracingOn()).toBe(false);
      const r = await callJson(t.baseUrl, 'GET', '/account', undefined, t.auth);
      expect(r.status).toBe(200);
    } finally {
      await t.close();
    }
    expect(otlp.posts).toHaveLength(0);
  });

  it('a request continues the caller\'s trace; store and executor spans are its children; a webhook delivery carries its job\'s traceparent', async () => {
    // The webhook's receiver, on loopback (allowed for the test like every webhook test's).
    const deliveries: IncomingHttpHeaders[] = [];
    const hooks = createServer((req, res) => {
      deliveries.push(req.headers);
      req.resume();
      // The first attempt fails: the retry is a job of the queue.
      res.writeHead(deliveries.length === 1 ? 500 : 200).end('ok');
    });
    await new Promise<void>((r) => hooks.listen(0, '127.0.0.1', () => r()));
    const t = await startNube({ env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_SERVICE_NAME: 'nube-test' } });
    try {
      expect(tracingOn()).toBe(true);
      const hook = await callJson(t.baseUrl, 'POST', '/webhooks', { url: `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/in`, events: ['database.created'] }, t.auth);
      expect(hook.status, JSON.stringify(hook.body)).toBe(201);
      const db = await callJson(t.baseUrl, 'POST', '/databases', { name: 'traced' }, t.auth);
      expect(db.status).toBe(201);
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const callerSpan = '00f067aa0ba902b7';
      const q = await callJson(t.baseUrl, 'POST', `/databases/${db.body.id}/query`, { sql: 'SELECT 1' }, { ...t.auth, traceparent: `00-${traceId}-${callerSpan}-01` });
      expect(q.status).toBe(200);

      // The request's server span: named by its operation, a child of the caller's span.
      const server = (await until(async () => otlp.spans.filter((s) => s.traceId === traceId && s.name === 'databases.query'), (xs) => xs.length > 0)).at(0);
      expect(server, JSON.stringify(otlp.spans.map((s) => [s.name, s.traceId, s.parentSpanId]))).toBeDefined();
      expect(server!.parentSpanId).toBe(callerSpan);
      expect(server!.kind).toBe(2); // SERVER
      expect(attr(server!, 'nube.operation')).toBe('databases.query');
      expect(Number(attr(server!, 'http.response.status_code'))).toBe(200);
      // Under it: the metadata store (auth, the database's row) and the database executor.
      const children = await until(
        async () => otlp.spans.filter((s) => s.traceId === traceId && s.parentSpanId === server!.spanId),
        (xs) => xs.some((s) => s.name.startsWith('database executor')) && xs.some((s) => s.name.startsWith('store ')),
      );
      expect(children.map((s) => s.name)).toContain('database executor query');
      expect(children.some((s) => s.name.startsWith('store ') && attr(s, 'db.system.name') === 'sqlite')).toBe(true);

      // The webhook delivery: its traceparent is the outbound client's span. The first attempt runs at
      // once in the trace of the request whose change sent the event; the retry, in its job's.
      const [first, retry] = await until(async () => deliveries, (d) => d.length > 1);
      const parts = (h: IncomingHttpHeaders | undefined) => {
        const tp = String(h?.traceparent ?? '');
        expect(tp).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        return tp.split('-') as [string, string, string, string];
      };
      const spansOf = (trace: string, span: string, also: (s: OtlpSpan) => boolean) =>
        until(
          async () => otlp.spans.filter((s) => s.traceId === trace),
          (xs) => xs.some((s) => s.spanId === span) && xs.some(also),
        );
      const [, firstTrace, firstSpan] = parts(first);
      const fromRequest = await spansOf(firstTrace, firstSpan, (s) => s.name === 'databases.create');
      expect(fromRequest.find((s) => s.spanId === firstSpan)?.name).toBe('outbound POST');
      expect(fromRequest.some((s) => s.name === 'databases.create')).toBe(true);
      const [, retryTrace, retrySpan] = parts(retry);
      const fromJob = await spansOf(retryTrace, retrySpan, (s) => s.name.startsWith('job '));
      const out = fromJob.find((s) => s.spanId === retrySpan);
      expect(out?.name).toBe('outbound POST');
      const job = fromJob.find((s) => s.name.startsWith('job '));
      expect(job, JSON.stringify(fromJob.map((s) => s.name))).toBeDefined();
      expect(out!.parentSpanId).toBe(job!.spanId);
    } finally {
      await t.close();
      await new Promise<void>((r) => hooks.close(() => r()));
    }
    expect(tracingOn()).toBe(false);
  }, 60_000);
});
