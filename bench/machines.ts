// Machines benchmark: `npm run bench -- machines`. A real nube (in this process, SQLite, namespaces
// driver, base template built) and a local source server (test/machines/source-server.ts) serving a
// small Node app with no dependencies as a .tar.gz. Baselines measured in the same run: a plain
// sandbox create (POST /sandboxes until running) and a Node process starting and listening inside a
// box (exec). Rows: machine create -> running, launch -> first 200 on its URL, restart -> serving,
// rollback -> serving, and 5 machines always on at once, each serving. Writes bench/results/machines.json.
import { rmSync } from 'node:fs';
import { request } from 'node:http';
import { loadavg } from 'node:os';
import { startSourceServer, tarGz } from '../test/machines/source-server.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';
import { startSandboxNube } from './lib/sandbox-nube.js';

const N = Number(process.env.BENCH_MACHINES_N ?? 5);
const ALWAYS_ON = 5;

const app = (v: string) => ({
  'package.json': JSON.stringify({ name: 'bench-app', version: '1.0.0', scripts: { start: 'node server.js' } }),
  'server.js': `require('http').createServer((q, s) => s.end('${v}')).listen(Number(process.env.PORT), '0.0.0.0');\n`,
});

async function main() {
  const { nube, key, dataDir, baseUrl } = await startSandboxNube('machines', 'nubem0:10.84.0.1/16', {
    NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
    NUBE_RATE_LIMIT_PER_MINUTE: '1000000',
  });
  const port = Number(new URL(baseUrl).port);
  const src = await startSourceServer();
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${baseUrl}/api/v2${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    // biome-ignore lint/suspicious/noExplicitAny: bench reads arbitrary JSON
    return { status: r.status, body: (await r.json()) as any };
  };
  const get = (url: string) =>
    new Promise<{ status: number; body: string }>((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/', headers: { host: new URL(url).host } }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => {
          body += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', () => resolve({ status: 0, body: '' }));
      req.end();
    });
  const untilServes = async (url: string, body: string) => {
    for (const end = Date.now() + 60_000; Date.now() < end; ) {
      const r = await get(url);
      if (r.status === 200 && r.body === body) return;
      await new Promise((res) => setTimeout(res, 20));
    }
    throw new Error(`${url} never served ${body}`);
  };
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const ms = (t0: number) => performance.now() - t0;
  try {
    await nube.services.sandboxes.core.runtime.ensureTemplate('base');
    for (let i = 0; i < ALWAYS_ON + 1; i++) src.put(`/app${i}.tar.gz`, tarGz(app(`app ${i}`)));
    src.put('/v2.tar.gz', tarGz(app('v2')));

    // Baseline 1: a plain sandbox, create -> running.
    const sbx: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const c = await call('POST', '/sandboxes', { timeoutSeconds: 600 });
      if (c.body.status !== 'running') throw new Error(`sandbox: ${JSON.stringify(c.body)}`);
      sbx.push(ms(t0));
      await call('DELETE', `/sandboxes/${c.body.id}`);
    }
    const sb = summarize(sbx);
    rows.push({ name: 'baseline: POST /sandboxes -> running', p50Ms: sb.p50Ms, p99Ms: sb.p99Ms });

    const creates: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const c = await call('POST', '/machines', { tier: 'micro' });
      if (c.body.status !== 'running') throw new Error(`machine: ${JSON.stringify(c.body)}`);
      creates.push(ms(t0));
      await call('DELETE', `/machines/${c.body.id}`);
    }
    const cr = summarize(creates);
    rows.push({ name: 'POST /machines -> running', p50Ms: cr.p50Ms, p99Ms: cr.p99Ms, ratio: cr.p50Ms / sb.p50Ms, ratioAgainst: 'baseline: POST /sandboxes -> running' });

    // Launches: each a new machine (the Tera plan's 5 boxes), kept for the always-on row.
    const launches: number[] = [];
    const machines: { id: string; url: string; releaseId: string; body: string }[] = [];
    for (let i = 0; i < ALWAYS_ON; i++) {
      const t0 = performance.now();
      const r = await call('POST', '/machines/launch', { archiveUrl: `${src.base}/app${i}.tar.gz` });
      if (r.body.status !== 'running') throw new Error(`launch: ${JSON.stringify(r.body)}`);
      await untilServes(r.body.url, `app ${i}`);
      launches.push(ms(t0));
      machines.push({ id: r.body.machineId, url: r.body.url, releaseId: r.body.releaseId, body: `app ${i}` });
    }
    const la = summarize(launches);
    rows.push({
      name: 'POST /machines/launch (local .tar.gz, Node app without dependencies) -> first 200 on its URL',
      p50Ms: la.p50Ms,
      p99Ms: la.p99Ms,
      ratio: la.p50Ms / sb.p50Ms,
      ratioAgainst: 'baseline: POST /sandboxes -> running',
      target: 'p50 < 5000 ms',
      pass: la.p50Ms < 5000,
    });

    const served = await Promise.all(machines.map(async (m) => (await get(m.url)).body === m.body));
    rows.push({
      name: `${ALWAYS_ON} machines always on at once, each serving its own app`,
      serving: `${served.filter(Boolean).length}/${ALWAYS_ON}`,
      target: `${ALWAYS_ON}/${ALWAYS_ON}`,
      pass: served.every(Boolean),
    });

    // Baseline 2: a Node process starting and listening inside a box (what any app restart pays).
    const m0 = machines[0]!;
    const sandboxId = (await call('GET', `/machines/${m0.id}`)).body.sandboxId;
    const nodeStart: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const e = await call('POST', `/sandboxes/${sandboxId}/exec`, { command: `node -e "require('http').createServer().listen(0, () => process.exit(0))"` });
      if (e.body.exitCode !== 0) throw new Error(`node start: ${JSON.stringify(e.body)}`);
      nodeStart.push(ms(t0));
    }
    const ns = summarize(nodeStart);
    rows.push({ name: 'baseline: exec of a Node process that starts listening, in the box', p50Ms: ns.p50Ms, p99Ms: ns.p99Ms });

    const restarts: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      await call('POST', `/machines/${m0.id}/restart`);
      await untilServes(m0.url, m0.body);
      restarts.push(ms(t0));
    }
    const rs = summarize(restarts);
    rows.push({
      name: 'POST /machines/{id}/restart -> serving',
      p50Ms: rs.p50Ms,
      p99Ms: rs.p99Ms,
      ratio: rs.p50Ms / ns.p50Ms,
      ratioAgainst: 'baseline: exec of a Node process that starts listening, in the box',
      target: 'p50 < 1000 ms',
      pass: rs.p50Ms < 1000,
    });

    // The status read: GET of a serving machine reads the supervisor's state line in the box, the box's
    // cgroup counters and asks the app's port, against GET of its sandbox (a row read).
    const timed = async (path: string) => {
      const xs: number[] = [];
      for (let i = 0; i < N * 4; i++) {
        const t0 = performance.now();
        const r = await call('GET', path);
        if (r.status !== 200) throw new Error(`GET ${path}: ${JSON.stringify(r.body)}`);
        xs.push(ms(t0));
      }
      return summarize(xs);
    };
    const sg = await timed(`/sandboxes/${sandboxId}`);
    rows.push({ name: 'baseline: GET /sandboxes/{id} (its sandbox)', p50Ms: sg.p50Ms, p99Ms: sg.p99Ms });
    const mg = await timed(`/machines/${m0.id}`);
    rows.push({
      name: 'GET /machines/{id} of a serving machine (status from the app: state line, cgroup counters, health check)',
      p50Ms: mg.p50Ms,
      p99Ms: mg.p99Ms,
      ratio: mg.p50Ms / sg.p50Ms,
      ratioAgainst: 'baseline: GET /sandboxes/{id} (its sandbox)',
    });

    // Rollback: deploy v2 onto the machine, then roll back to its recovery release and forth.
    const v2 = await call('POST', '/machines/launch', { sandboxId, archiveUrl: `${src.base}/v2.tar.gz` });
    await untilServes(m0.url, 'v2');
    const rollbacks: number[] = [];
    for (let i = 0; i < N; i++) {
      const [to, body] = i % 2 === 0 ? [m0.releaseId, m0.body] : [v2.body.releaseId as string, 'v2'];
      const t0 = performance.now();
      const r = await call('POST', `/machines/${m0.id}/rollback`, { releaseId: to });
      if (r.status !== 200) throw new Error(`rollback: ${JSON.stringify(r.body)}`);
      await untilServes(m0.url, body);
      rollbacks.push(ms(t0));
    }
    const rb = summarize(rollbacks);
    rows.push({
      name: 'POST /machines/{id}/rollback -> the release serves',
      p50Ms: rb.p50Ms,
      p99Ms: rb.p99Ms,
      ratio: rb.p50Ms / rs.p50Ms,
      ratioAgainst: 'POST /machines/{id}/restart -> serving',
      target: 'p50 < 2000 ms',
      pass: rb.p50Ms < 2000,
    });
    for (const m of machines) await call('DELETE', `/machines/${m.id}`);
    notes.push(
      `load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(' ')} (2 cores shared with other work); ${N} samples per row`,
      'launch: the source is fetched by nube through the outbound client, written into a new micro box, unpacked and (when it has dependencies or a build script) built there by a durable job, started under the supervisor, waited for until its port answers the health check from the host, and published as the recovery release; the clock stops at the first 200 through nube’s port proxy',
      'restart: the supervisor is stopped (SIGTERM to its group, the app’s session after it), the runspec read again from /app, a new supervisor started with the secrets in its environment; the restart answers once the app answers its health check; the clock stops at the first 200 through the proxy',
      'rollback: the release’s read-only copy replaces /app (cp -a), then a restart; nothing is installed or built',
    );
  } catch (e) {
    console.error('bench machines failed:', e);
    process.exitCode = 1;
  } finally {
    const result = newResult('machines', rows, notes);
    printTable(result.rows);
    writeResult(result);
    for (const s of await nube.services.sandboxes.core.runtime.list()) await nube.services.sandboxes.core.runtime.destroy(s.id).catch(() => {});
    await src.close();
    await nube.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
