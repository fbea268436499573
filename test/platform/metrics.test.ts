import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';

const TOKEN = 'metrics-token-0123456789abcdef';

interface Series {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
function parse(text: string): Series[] {
  const out: Series[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the one sample of `name` whose labels include `labels`; undefined when absent. */
function value(all: Series[], name: string, labels: Record<string, string> = {}): number | undefined {
  const hits = all.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (hits.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${hits.length} samples`);
  return hits[0]?.value;
}

/** GET with a Host header of our choosing (fetch does not let one set Host). */
function statusWithHost(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe.each(DIALECTS)('GET /metrics (%s)', (dialect) => {
  let t: TestNube;
  let receiver: Receiver;
  const scrape = async () => {
    const res = await fetch(`${t.baseUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    return parse(await res.text());
  };

  beforeAll(async () => {
    receiver = await startReceiver();
    t = await startNube({
      dialect,
      env: { NUBE_METRICS_TOKEN: TOKEN, NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_WEBHOOK_TIMEOUT_MS: '2000' },
    });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  it('refuses a scrape without the token or with a wrong one', async () => {
    const none = await fetch(`${t.baseUrl}/metrics`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(await json(none)).toMatchObject({ code: 'Unauthorized' });
    const wrong = await fetch(`${t.baseUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}x` } });
    expect(wrong.status).toBe(401);
    // An owner key is not the metrics credential.
    const owner = await fetch(`${t.baseUrl}/metrics`, { headers: t.auth });
    expect(owner.status).toBe(401);
  });

  it('reports requests per operation and status class, jobs, webhooks, databases, sandboxes and blobs', async () => {
    const api = caller(t);
    for (let i = 0; i < 3; i++) expect((await api('GET', '/account')).status).toBe(200);
    expect((await api('GET', '/databases/db_doesnotexist')).status).toBe(404);
    expect((await api('POST', '/databases', { name: 'bad name!' })).status).toBe(400);
    expect((await fetch(`${t.baseUrl}/no/such/route`)).status).toBe(404);
    // A request for a sandbox port (by Host) is the proxy's, whatever its path: not account.get's.
    expect(await statusWithHost(`${t.baseUrl}/api/v2/account`, '8080-sbx_nosuchbox.sandbox.localhost')).toBe(404);

    // A webhook delivery (database.created), a database with a query, and a file of 5 bytes in US.
    const hook = await api('POST', '/webhooks', { url: receiver.url, events: ['database.created'] });
    expect(hook.status).toBeLessThan(300);
    const db = await json(await api('POST', '/databases', { name: 'metrics' }));
    expect((await api('POST', `/databases/${db.id}/query`, { sql: 'select 1' })).status).toBe(200);
    await receiver.waitFor(1, 15_000);
    const created = await json(await api('POST', '/files', { fileName: 'a.txt', contentType: 'text/plain', size: 5, region: 'US' }));
    expect((await fetch(created.putUrl, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: 'hola!' })).status).toBeLessThan(300);

    // Jobs no worker runs: one overdue by a minute, one due in an hour.
    await t.nube.deps.jobs.enqueue('test.orphan', {}, { runAt: Date.now() - 60_000 });
    await t.nube.deps.jobs.enqueue('test.later', {}, { runAt: Date.now() + 3_600_000 });

    let all = await scrape();
    // The delivery attempt is counted once the job records it, which may trail the receiver by a moment,
    // and the upload's event leaves the outbox once the relay has passed (on a loaded host, after the scrape).
    const settled = () => value(all, 'nube_webhook_delivery_attempts_total', { outcome: 'success' }) && value(all, 'nube_outbox_backlog') === 0;
    for (let i = 0; i < 100 && !settled(); i++) {
      await new Promise((r) => setTimeout(r, 100));
      all = await scrape();
    }
    const h = 'nube_http_request_duration_seconds';
    expect(value(all, `${h}_count`, { operation: 'account.get', status_class: '2xx' })).toBe(3);
    expect(value(all, `${h}_bucket`, { operation: 'account.get', status_class: '2xx', le: '+Inf' })).toBe(3);
    expect(value(all, `${h}_sum`, { operation: 'account.get', status_class: '2xx' })).toBeGreaterThan(0);
    expect(value(all, `${h}_count`, { operation: 'databases.get', status_class: '4xx' })).toBe(1);
    expect(value(all, `${h}_count`, { operation: 'databases.create', status_class: '4xx' })).toBe(1);
    expect(value(all, `${h}_count`, { operation: 'databases.create', status_class: '2xx' })).toBe(1);
    expect(value(all, `${h}_count`, { operation: 'unmatched', status_class: '4xx' })).toBe(1);
    expect(value(all, `${h}_count`, { operation: 'sandboxes.proxy', status_class: '4xx' })).toBe(1);
    // The refused scrapes of the first test, under the route outside the registry.
    expect(value(all, `${h}_count`, { operation: 'GET /metrics', status_class: '4xx' })).toBeGreaterThanOrEqual(3);

    expect(value(all, 'nube_webhook_delivery_attempts_total', { outcome: 'success' })).toBe(1);
    // The event of that upload went through the outbox, now empty.
    expect(value(all, 'nube_outbox_backlog')).toBe(0);
    expect(value(all, 'nube_jobs_due', { type: 'test.orphan' })).toBe(1);
    expect(value(all, 'nube_jobs_oldest_due_age_seconds', { type: 'test.orphan' })).toBeGreaterThanOrEqual(59);
    expect(value(all, 'nube_jobs_scheduled', { type: 'test.later' })).toBe(1);
    expect(value(all, 'nube_jobs_due', { type: 'test.later' })).toBe(0);
    expect(value(all, 'nube_jobs_oldest_due_age_seconds', { type: 'test.later' })).toBe(0);
    expect(value(all, 'nube_database_executors')).toBeGreaterThanOrEqual(1);
    expect(value(all, 'nube_database_executors_busy')).toBeGreaterThanOrEqual(0);
    expect(value(all, 'nube_database_requests_queued')).toBe(0);
    for (const status of ['starting', 'running', 'suspended']) expect(value(all, 'nube_sandboxes', { status })).toBe(0);
    expect(value(all, 'nube_blob_stored_bytes', { region: 'US' })).toBe(5);
    expect(value(all, 'nube_blob_stored_files', { region: 'US' })).toBe(1);
    expect(value(all, 'nube_blob_stored_bytes', { region: 'EU' })).toBe(0);
    // Process metrics come along.
    expect(value(all, 'process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(value(all, 'nube_metrics_collect_errors_total')).toBeUndefined();

    // Once the orphan is gone its type still reads 0 rather than vanishing.
    await t.nube.deps.jobs.cancel({ id: (await t.nube.deps.store.db.selectFrom('jobs').select('id').where('type', '=', 'test.orphan').executeTakeFirstOrThrow()).id });
    await new Promise((r) => setTimeout(r, 1100));
    all = await scrape();
    expect(value(all, 'nube_jobs_due', { type: 'test.orphan' })).toBe(0);
  }, 60_000);
});

describe('GET /metrics settings', () => {
  it('is absent unless configured, and public only when asked', async () => {
    const off = await startNube();
    try {
      const res = await fetch(`${off.baseUrl}/metrics`);
      expect(res.status).toBe(404);
      expect(await json(res)).toMatchObject({ code: 'NotFound' });
    } finally {
      await off.close();
    }
    const open = await startNube({ env: { NUBE_METRICS_PUBLIC: 'true' } });
    try {
      const res = await fetch(`${open.baseUrl}/metrics`);
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('# TYPE nube_jobs_due gauge');
    } finally {
      await open.close();
    }
  }, 60_000);

  it('refuses a token and a public /metrics together, and a short token', () => {
    expect(() => loadConfig({ NUBE_DATA_DIR: '/tmp', NUBE_SECRET: 'x'.repeat(32), NUBE_METRICS_TOKEN: TOKEN, NUBE_METRICS_PUBLIC: '1' })).toThrow(
      ConfigError,
    );
    expect(() => loadConfig({ NUBE_DATA_DIR: '/tmp', NUBE_SECRET: 'x'.repeat(32), NUBE_METRICS_TOKEN: 'short' })).toThrow(/NUBE_METRICS_TOKEN/);
  });
});
