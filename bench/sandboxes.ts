// Sandboxes benchmark: `npm run bench -- sandboxes`. The runtime (namespaces driver) directly, and the
// same paths through nube's HTTP API (create -> first exec result, exec `true` round trip). Every
// latency row has its ratio to a bare `bwrap true` (the floor of starting a namespaced process) timed
// in the same run. Writes bench/results/sandboxes.json.
import { mkdirSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { loadConfig } from '../src/config.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import { buildServer } from '../src/server.js';
import type { SandboxRuntime } from '../src/areas/sandboxes/runtime/driver.js';
import { GvisorRuntime } from '../src/areas/sandboxes/runtime/gvisor/runtime.js';
import { NamespacesRuntime } from '../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { bwrapTrue, time } from './lib/bare.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { percentile, round } from './lib/stats.js';

const ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';
const BRIDGE = { name: 'nubeb0', cidr: '10.79.0.1/16' };
const dataDir = `${ROOT}/bench-${process.pid}`;
const apiDir = `${ROOT}/bench-api-${process.pid}`;
const runtime = new NamespacesRuntime({
  dataDir,
  templatesDir: `${ROOT}/templates`,
  bridge: BRIDGE,
  cgroupParent: 'nube-bench',
  defaultLimits: { memoryMb: 256, cpus: 1, pids: 256 },
});


const rows: ResultRow[] = [];
const BARE = 'bare bwrap true';
let bareP50 = 1;
function row(name: string, samples: number[], target: string, limitMs?: number, extra: Partial<ResultRow> = {}) {
  const p50 = percentile(samples, 50);
  rows.push({
    name,
    p50Ms: p50,
    p99Ms: percentile(samples, 99),
    n: samples.length,
    ratio: p50 / bareP50,
    ratioAgainst: BARE,
    target,
    ...(limitMs !== undefined ? { pass: p50 < limitMs } : {}),
    ...extra,
  });
}
let seq = 0;
const nextId = () => `bench-${process.pid.toString(36)}-${seq++}`;

/** The same paths through a real nube (in this process, SQLite) over loopback HTTP. */
async function apiRows(): Promise<void> {
  mkdirSync(apiDir, { recursive: true });
  const ownerKey = `nube_sk_live_${randomToken(40, BASE62)}`;
  const config = loadConfig({
    NUBE_DATA_DIR: apiDir,
    NUBE_PORT: '0',
    NUBE_OWNER_KEY: ownerKey,
    NUBE_LOG_LEVEL: 'silent',
    NUBE_TEMPLATES_DIR: `${ROOT}/templates`,
    NUBE_SANDBOX_BRIDGE: `${BRIDGE.name}:${BRIDGE.cidr}`,
    NUBE_SANDBOX_CGROUP: 'nube-bench',
  });
  const nube = await buildServer(config);
  const base = `${await nube.listen()}/api/v2`;
  const post = async (key: string, path: string, body: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const json = (await r.json()) as { id?: string; exitCode?: number };
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(json)}`);
    return json;
  };
  try {
    // Creation is rate limited to 10 a minute per owner: spread the samples over a few owners.
    const keys = [ownerKey];
    for (let i = 0; i < 2; i++) keys.push((await nube.services.account.createAccount({ name: `bench${i}`, plan: 'tera' })).secret);
    const warm = await post(ownerKey, '/sandboxes', { timeoutSeconds: 300 });
    await post(ownerKey, `/sandboxes/${warm.id}/exec`, { command: 'true' });
    const createExec: number[] = [];
    const created: { key: string; id: string }[] = [];
    for (let i = 0; i < 24; i++) {
      const key = keys[i % keys.length]!;
      createExec.push(
        await time(async () => {
          const s = await post(key, '/sandboxes', { timeoutSeconds: 300 });
          await post(key, `/sandboxes/${s.id}/exec`, { command: 'true' });
          created.push({ key, id: s.id! });
        }),
      );
      const last = created.pop()!;
      await fetch(`${base}/sandboxes/${last.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${last.key}` } });
    }
    row('API: POST /sandboxes -> first exec result', createExec, '< 150 ms p50', 150);
    const execs: number[] = [];
    for (let i = 0; i < 200; i++) execs.push(await time(() => post(ownerKey, `/sandboxes/${warm.id}/exec`, { command: 'true' })));
    row('API: POST exec `true` round trip', execs, '< 15 ms p50', 15);
  } finally {
    const rt = nube.services.sandboxes.core.runtime;
    for (const s of await rt.list()) await rt.destroy(s.id).catch(() => {});
    await nube.close();
    rmSync(apiDir, { recursive: true, force: true });
    rmSync((rt as NamespacesRuntime).runDir, { recursive: true, force: true });
  }
}

/** Create -> first `exec true` result, n times, after one warm-up create (helpers built, bridge up). */
async function createExecSamples(rt: SandboxRuntime, n: number): Promise<number[]> {
  await rt.create({ id: nextId() }).then((s) => rt.destroy(s.id));
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const id = nextId();
    samples.push(
      await time(async () => {
        await rt.create({ id });
        await rt.exec(id, 'true');
      }),
    );
    await rt.destroy(id);
  }
  return samples;
}

/** The gVisor driver (NUBE_SANDBOX_DRIVER=gvisor) on the same template, bridge and cgroup parent. */
async function gvisorRows(): Promise<void> {
  const gvDir = `${ROOT}/bench-gvisor-${process.pid}`;
  const gv = new GvisorRuntime({
    dataDir: gvDir,
    templatesDir: `${ROOT}/templates`,
    bridge: BRIDGE,
    cgroupParent: 'nube-bench',
    defaultLimits: { memoryMb: 256, cpus: 1, pids: 256 },
  });
  try {
    row('gvisor: create -> first exec', await createExecSamples(gv, 10), '- (targets are for the default driver)');
    const id = nextId();
    await gv.create({ id });
    const execs: number[] = [];
    for (let i = 0; i < 50; i++) execs.push(await time(() => gv.exec(id, 'true')));
    row('gvisor: exec true', execs, '-');
    const resumes: number[] = [];
    for (let i = 0; i < 3; i++) {
      await gv.suspend(id);
      resumes.push(await time(() => gv.resume(id)));
    }
    row('gvisor: resume', resumes, '-');
  } finally {
    for (const s of await gv.list()) await gv.destroy(s.id).catch(() => {});
    rmSync(gvDir, { recursive: true, force: true });
    rmSync(gv.runDir, { recursive: true, force: true });
  }
}

try {
  const tpl = await time(() => runtime.ensureTemplate('base', (l) => console.log(l)));
  const bare: number[] = [];
  for (let i = 0; i < 30; i++) bare.push(await time(bwrapTrue));
  bareP50 = percentile(bare, 50);
  row(BARE, bare, '-');

  row('runtime: create -> first exec', await createExecSamples(runtime, 20), '< 150 ms p50', 150);

  const id = nextId();
  await runtime.create({ id });
  const execs: number[] = [];
  for (let i = 0; i < 200; i++) execs.push(await time(() => runtime.exec(id, 'true')));
  row('runtime: exec true', execs, '< 15 ms p50', 15);

  await apiRows();

  await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
  const forks: number[] = [];
  for (let i = 0; i < 3; i++) {
    const kid = nextId();
    let snap = '';
    forks.push(
      await time(async () => {
        const [k] = await runtime.fork(id, [kid]);
        snap = k!.layers[0]!;
      }),
    );
    await runtime.destroy(kid);
    await runtime.deleteSnapshot(snap);
  }
  row('runtime: fork (parent wrote 100 MB)', forks, '< 1000 ms', 1000);

  const resumes: number[] = [];
  for (let i = 0; i < 5; i++) {
    await runtime.suspend(id);
    resumes.push(await time(() => runtime.resume(id)));
  }
  row('runtime: resume', resumes, '< 300 ms', 300);
  await runtime.destroy(id);

  const many = Array.from({ length: 50 }, nextId);
  const startMany = performance.now();
  for (const m of many) await runtime.create({ id: m });
  const createdMs = performance.now() - startMany;
  const answers = await Promise.all(many.map((m) => runtime.exec(m, 'hostname')));
  const ok = answers.filter((a, i) => a.stdout.trim() === many[i]).length;
  row(`runtime: 50 at once, ${ok}/50 answered exec`, answers.map((a) => a.durationMs), '50/50', undefined, {
    pass: ok === 50,
    create50SequentialMs: round(createdMs),
  });
  for (const m of many) await runtime.destroy(m);

  await gvisorRows();

  printTable(rows);
  const file = writeResult(
    newResult('sandboxes', rows, [
      `Template ready in ${round(tpl)} ms (cached build). Load average at the end: ${loadavg().map(round).join(', ')} on this 2-core VM (other suites may run at the same time).`,
      'gvisor rows call GvisorRuntime directly (runsc 0.0~20221219, ptrace platform: /dev/kvm here is nested and hangs).',
      'runtime rows call NamespacesRuntime directly; API rows go through nube over loopback HTTP (auth, validation, SQLite record, timers, rate limit) with fetch in the same process.',
      'API create -> first exec: POST /sandboxes (template built) then POST /sandboxes/{id}/exec `true`, timed together; samples spread over 3 owners because creation is limited to 10 a minute per owner.',
      'ratio = p50 / p50 of a bare `bwrap --unshare-all ... true` in the same run.',
    ]),
  );
  console.log(`wrote ${file}`);
} finally {
  for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(runtime.runDir, { recursive: true, force: true });
}
