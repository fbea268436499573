// Traces across nodes and into sandboxes (issue 37 item 4), against a local OTLP/HTTP receiver: a
// request a replica forwards to the node holding its database has a client span for the forwarding,
// and the holding node's server span continues the same trace under it (the `traceparent` went along);
// a sandbox exec has the spawner's span inside the request's trace. (Webhook deliveries' `traceparent`
// is in tracing.test.ts.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OtlpSpan, receiver } from '../helpers/otlp-receiver.js';
import { callJson } from '../helpers/server.js';
import { type Cluster, startCluster, syncHeartbeats } from '../nodes/cluster.js';
import { createRunning, type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS } from '../sandboxes/helpers.js';
import { until } from '../webhooks/helpers.js';

let otlp: Awaited<ReturnType<typeof receiver>>;
beforeAll(async () => {
  otlp = await receiver();
});
afterAll(() => new Promise<void>((r) => otlp.server.close(() => r())));

const random = (bytes: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('hex');

/** The chain of parents of `span` within its trace, nearest first (as far as the receiver has them). */
function ancestors(span: OtlpSpan): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  let at: OtlpSpan | undefined = span;
  while (at?.parentSpanId) {
    const parentId: string = at.parentSpanId;
    at = otlp.spans.find((s) => s.traceId === span.traceId && s.spanId === parentId);
    if (at) out.push(at);
  }
  return out;
}

describe('forwarding between nodes', () => {
  let c: Cluster;
  beforeAll(async () => {
    c = await startCluster({ count: 2, env: () => ({ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_SERVICE_NAME: 'nube-nodes' }) });
  }, 120_000);
  afterAll(async () => {
    await c?.close();
  });

  it("a forwarded request's trace continues on the node holding the database, under the forwarding span", async () => {
    // A database on node-1, asked for through node-0.
    let held: string | undefined;
    for (let i = 0; i < 12 && !held; i++) {
      await syncHeartbeats(c);
      const db = await c.call('POST', '/databases', { name: `traced-${random(4)}` }, 0);
      expect(db.status, JSON.stringify(db.body)).toBe(201);
      const row = await c.nodes[0]!.nube.deps.store.db.selectFrom('databases').select('node_id').where('id', '=', db.body.id).executeTakeFirstOrThrow();
      if (row.node_id === 'node-1') held = db.body.id;
    }
    expect(held, 'no database was placed on node-1').toBeDefined();
    const traceId = random(16);
    const callerSpan = random(8);
    const q = await callJson(c.nodes[0]!.baseUrl, 'POST', `/databases/${held}/query`, { sql: 'SELECT 1' }, {
      authorization: `Bearer ${c.ownerKey}`,
      traceparent: `00-${traceId}-${callerSpan}-01`,
    });
    expect(q.status, JSON.stringify(q.body)).toBe(200);

    const spans = await until(
      async () => otlp.spans.filter((s) => s.traceId === traceId),
      (xs) => {
        const fwd = xs.find((s) => s.name === 'forward to node node-1');
        return !!fwd && xs.some((s) => s.parentSpanId === fwd.spanId && s.kind === 2) && xs.some((s) => s.name.startsWith('database executor'));
      },
    );
    const forward = spans.find((s) => s.name === 'forward to node node-1');
    expect(forward, JSON.stringify(spans.map((s) => [s.name, s.kind, s.spanId, s.parentSpanId]))).toBeDefined();
    expect(forward!.kind).toBe(3); // CLIENT
    // node-0's server span (the caller's child) is the forwarding span's ancestor.
    const up = ancestors(forward!);
    expect(up.at(-1)?.parentSpanId).toBe(callerSpan);
    expect(up.at(-1)?.kind).toBe(2);
    // node-1's server span: a child of the forwarding span, in the same trace (the traceparent went along).
    const remote = spans.find((s) => s.parentSpanId === forward!.spanId && s.kind === 2)!;
    expect(remote.name).toBe('databases.query');
    // And the database executor ran under node-1's request.
    const exec = spans.find((s) => s.name === 'database executor query')!;
    expect(ancestors(exec).map((s) => s.spanId)).toContain(remote.spanId);
  }, 120_000);
});

describe('the sandbox spawner', () => {
  let t: SandboxNube;
  beforeAll(async () => {
    t = await startSandboxNube('tracing', { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_SERVICE_NAME: 'nube-sandboxes' });
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    if (t) await stopSandboxNube(t);
  }, 120_000);

  it("an exec's spawn is a span inside the request's trace", async () => {
    const sbx = await createRunning(t);
    const traceId = random(16);
    const callerSpan = random(8);
    const e = await t.call('POST', `/sandboxes/${sbx.id}/exec`, { command: 'echo traced' }, { traceparent: `00-${traceId}-${callerSpan}-01` });
    expect(e.status, JSON.stringify(e.body)).toBe(200);
    expect(e.body.stdout).toBe('traced\n');
    const spans = await until(
      async () => otlp.spans.filter((s) => s.traceId === traceId),
      (xs) => xs.some((s) => s.name === 'sandbox spawn') && xs.some((s) => s.name === 'sandboxes.exec'),
    );
    const server = spans.find((s) => s.name === 'sandboxes.exec')!;
    expect(server.parentSpanId).toBe(callerSpan);
    const spawn = spans.find((s) => s.name === 'sandbox spawn')!;
    expect(ancestors(spawn).map((s) => s.spanId)).toContain(server.spanId);
  }, TEMPLATE_WAIT_MS);
});
