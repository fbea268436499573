// Sandboxes benchmark: `npm run bench -- sandboxes`. The runtime (namespaces driver) directly, and the
// same paths through nube's HTTP API (create -> first exec result, exec `true` round trip). Every
// latency row has its ratio to a bare `bwrap true` (the floor of starting a namespaced process) timed
// in the same run. Writes bench/results/sandboxes.json.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { loadConfig } from '../src/config.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import { buildServer } from '../src/server.js';
import type { SandboxRuntime } from '../src/areas/sandboxes/runtime/driver.js';
import { GvisorRuntime } from '../src/areas/sandboxes/runtime/gvisor/runtime.js';
import { STATIC_SH_DIR } from '../src/areas/sandboxes/runtime/static-sh.js';
import { NamespacesRuntime } from '../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { bwrapTrue, time } from './lib/bare.js';
import { execProfile } from './lib/exec-profile.js';
import { density } from './lib/sandbox-density.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { percentile, round } from './lib/stats.js';

const ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';
const STATIC_SH_NOTE = existsSync(`${STATIC_SH_DIR}/sh`) ? 'installed for this run' : 'NOT installed for this run (commands start slower)';
const RUNSC_VERSION = spawnSync('runsc', ['--version']).stdout?.toString().split('\n')[0] ?? 'runsc missing';
// NUBE_BENCH_BRIDGE=name:cidr when another run holds the default one.
const [bridgeName, bridgeCidr] = (process.env.NUBE_BENCH_BRIDGE ?? 'nubeb0:10.79.0.1/16').split(':') as [string, string];
const BRIDGE = { name: bridgeName, cidr: bridgeCidr };
const dataDir = `${ROOT}/bench-${process.pid}`;
const apiDir = `${ROOT}/bench-api-${process.pid}`;
/** What every runtime of this bench shares: the template builds, bridge, cgroup parent and limits. */
function runtimeOptions(dir: string) {
  return {
    dataDir: dir,
    templatesDir: `${ROOT}/templates`,
    bridge: BRIDGE,
    cgroupParent: 'nube-bench',
    defaultLimits: { memoryMb: 256, cpus: 1, pids: 256 },
  };
}
const runtime = new NamespacesRuntime(runtimeOptions(dataDir));


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
/** Ratios and bare-relative targets against the bare samples of the whole run. */
function rebase(bare: number[]): void {
  const first = bareP50;
  bareP50 = percentile(bare, 50);
  for (const r of rows) {
    if (r.name === BARE) Object.assign(r, { p50Ms: bareP50, p99Ms: percentile(bare, 99), n: bare.length, bareP50AtStartMs: round(first) });
    r.ratio = (r.p50Ms ?? 0) / bareP50;
    const m = /^<= ([\d.]+)x bare$/.exec(r.target ?? '');
    if (m) r.pass = (r.p50Ms ?? 0) <= Number(m[1]) * bareP50;
  }
}
let nsClaimP50 = 1;
/** Idle sandboxes held at once for the density row (NUBE_BENCH_DENSITY to change). */
const DENSITY = Number(process.env.NUBE_BENCH_DENSITY ?? 200);
let seq = 0;
const nextId = () => `bench-${process.pid.toString(36)}-${seq++}`;

interface ApiNube {
  nube: Awaited<ReturnType<typeof buildServer>>;
  keys: string[];
  post(key: string, path: string, body: unknown): Promise<{ id?: string; exitCode?: number }>;
  /** The same request through fetch (undici), which costs this process more CPU than node:http. */
  postFetch(key: string, path: string, body: unknown): Promise<{ id?: string; exitCode?: number }>;
  del(key: string, id: string): Promise<void>;
  close(): Promise<void>;
}

/** A real nube (in this process, SQLite) over loopback HTTP, with `owners` owners' keys. */
async function apiNube(pool: number, owners: number): Promise<ApiNube> {
  const dir = `${apiDir}-${pool}`;
  mkdirSync(dir, { recursive: true });
  const ownerKey = `nube_sk_live_${randomToken(40, BASE62)}`;
  const config = loadConfig({
    NUBE_DATA_DIR: dir,
    NUBE_PORT: '0',
    NUBE_OWNER_KEY: ownerKey,
    NUBE_LOG_LEVEL: 'silent',
    NUBE_TEMPLATES_DIR: `${ROOT}/templates`,
    NUBE_SANDBOX_BRIDGE: `${BRIDGE.name}:${BRIDGE.cidr}`,
    NUBE_SANDBOX_CGROUP: 'nube-bench',
    NUBE_SANDBOX_POOL: String(pool),
  });
  const nube = await buildServer(config);
  const base = `${await nube.listen()}/api/v2`;
  // The client shares this process (and its event loop) with nube: node:http over one keep-alive
  // connection is the lightest client Node has, so what a sample holds is mostly nube's own work.
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const post = (key: string, path: string, body: unknown) =>
    new Promise<{ id?: string; exitCode?: number }>((resolve, reject) => {
      const text = JSON.stringify(body);
      const req = request(
        `${base}${path}`,
        {
          method: 'POST',
          agent,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: string; exitCode?: number };
            if (res.statusCode !== 200) reject(new Error(`${path}: ${res.statusCode} ${JSON.stringify(json)}`));
            else resolve(json);
          });
        },
      );
      req.on('error', reject);
      req.end(text);
    });
  const postFetch = async (key: string, path: string, body: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const json = (await r.json()) as { id?: string; exitCode?: number };
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(json)}`);
    return json;
  };
  const del = async (key: string, id: string) => {
    await fetch(`${base}/sandboxes/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${key}` } });
  };
  // Creation is rate limited to 10 a minute per owner: samples are spread over a few owners.
  const keys = [ownerKey];
  for (let i = 1; i < owners; i++) keys.push((await nube.services.account.createAccount({ name: `bench${i}`, plan: 'tera' })).secret);
  return {
    nube,
    keys,
    post,
    postFetch,
    del,
    async close() {
      agent.destroy();
      const rt = nube.services.sandboxes.core.runtime;
      await nube.close();
      for (const s of await rt.list()) await rt.destroy(s.id).catch(() => {});
      await rt.close();
      await (rt as NamespacesRuntime).detachStore();
      rmSync(dir, { recursive: true, force: true });
      rmSync((rt as NamespacesRuntime).runDir, { recursive: true, force: true });
    },
  };
}

let apiExecP50 = 0;

/** Create -> first exec and exec `true` through the API, without a warm pool (every create starts one). */
async function apiRows(): Promise<void> {
  const api = await apiNube(0, 3);
  const [ownerKey] = api.keys as [string];
  try {
    const warm = await api.post(ownerKey, '/sandboxes', { timeoutSeconds: 300 });
    await api.post(ownerKey, `/sandboxes/${warm.id}/exec`, { command: 'true' });
    const createExec: number[] = [];
    for (let i = 0; i < 24; i++) {
      const key = api.keys[i % api.keys.length]!;
      let id = '';
      createExec.push(
        await time(async () => {
          const s = await api.post(key, '/sandboxes', { timeoutSeconds: 300 });
          await api.post(key, `/sandboxes/${s.id}/exec`, { command: 'true' });
          id = s.id!;
        }),
      );
      await api.del(key, id);
    }
    row('API: POST /sandboxes -> first exec result, no pool', createExec, '<= 4x bare', 4 * bareP50);
    const execs: number[] = [];
    const viaFetch: number[] = [];
    // Interleaved in tens, so load from elsewhere falls on both clients alike.
    for (let i = 0; i < 300; i++) {
      const f = Math.floor(i / 10) % 3 === 2;
      const t = await time(() => (f ? api.postFetch : api.post)(ownerKey, `/sandboxes/${warm.id}/exec`, { command: 'true' }));
      (f ? viaFetch : execs).push(t);
    }
    apiExecP50 = percentile(execs, 50);
    row('API: POST exec `true` round trip', execs, '<= 0.25x bare', 0.25 * bareP50);
    row('API: POST exec `true` round trip, fetch client', viaFetch, '-');
  } finally {
    await api.close();
  }
}

/** Creates of the pool-hit burst (all taken from a pool filled for them, within its refill delay). */
const BURST = 24;

/**
 * The same create with a warm pool, measured two ways. The target row compares like with like: the
 * API exec `true` p50 comes from samples back to back, so do these: a burst of creates, each followed
 * by its first exec, from a pool filled for the burst beforehand, all within the pool's refill delay
 * (no refill runs among them). Then each create alone, after the host went quiet (300 ms, the pool
 * refilled), beside an exec `true` taken alone after the same quiet: a process that sat idle answers
 * its first request slower (caches, the CPU's own idle states), so those two are compared together.
 */
async function apiPoolRows(): Promise<void> {
  // Creation is rate limited to 10 a minute per owner: 2 x BURST + 1 creates need 6 owners at least.
  const api = await apiNube(BURST + 2, 8);
  const pool = api.nube.services.sandboxes.core.pool;
  const ready = async (n: number) => {
    await new Promise((r) => setTimeout(r, 300));
    const k = (await pool.status()).keys.find((x) => x.key === 'template:base');
    return (k?.ready ?? 0) >= n && !k?.filling;
  };
  const owner = (i: number) => api.keys[i % api.keys.length]!;
  try {
    const first = await api.post(owner(0), '/sandboxes', { timeoutSeconds: 300 });
    await api.del(owner(0), first.id!);
    for (const end = Date.now() + 120_000; !(await ready(BURST + 1)) && Date.now() < end; );
    const creates: number[] = [];
    const createExec: number[] = [];
    const held: [string, string][] = [];
    for (let i = 0; i < BURST; i++) {
      let id = '';
      const c = await time(async () => {
        id = (await api.post(owner(i), '/sandboxes', { timeoutSeconds: 300, env: { N: String(i) } })).id!;
      });
      const e = await time(() => api.post(owner(i), `/sandboxes/${id}/exec`, { command: 'true' }));
      creates.push(c);
      createExec.push(c + e);
      held.push([owner(i), id]);
    }
    const s = (await pool.status()).keys.find((k) => k.key === 'template:base');
    const execNote = { apiExecP50Ms: round(apiExecP50), hits: s?.hits ?? 0, misses: s?.misses ?? 0 };
    row('API: POST /sandboxes, pool hit (a burst, back to back)', creates, '<= 2x API exec `true` p50', 2 * apiExecP50, execNote);
    row('API: POST /sandboxes -> first exec result, pool hit (burst)', createExec, '-', undefined, execNote);
    for (const [key, id] of held) await api.del(key, id);

    const alone: number[] = [];
    const aloneExec: number[] = [];
    const warm = await api.post(owner(BURST), '/sandboxes', { timeoutSeconds: 300 });
    await api.post(owner(BURST), `/sandboxes/${warm.id}/exec`, { command: 'true' });
    for (let i = 0; i < BURST; i++) {
      const key = owner(BURST + 1 + i);
      for (const end = Date.now() + 60_000; !(await ready(1)) && Date.now() < end; );
      let id = '';
      alone.push(
        await time(async () => {
          id = (await api.post(key, '/sandboxes', { timeoutSeconds: 300, env: { N: String(i) } })).id!;
        }),
      );
      await api.del(key, id);
      for (const end = Date.now() + 60_000; !(await ready(1)) && Date.now() < end; );
      aloneExec.push(await time(() => api.post(owner(BURST), `/sandboxes/${warm.id}/exec`, { command: 'true' })));
    }
    const aloneExecP50 = percentile(aloneExec, 50);
    row('API: POST /sandboxes, pool hit, alone after 300 ms quiet', alone, '-', undefined, {
      apiExecAfterQuietP50Ms: round(aloneExecP50),
      vsApiExecAfterQuiet: round(percentile(alone, 50) / aloneExecP50),
    });
    row('API: POST exec `true`, alone after 300 ms quiet', aloneExec, '-');
  } finally {
    await api.close();
  }
}

/**
 * Between two pool-hit samples: a pool hit comes to a host that is not still busy with the previous
 * one's aftermath (the gVisor agent forks a replacement worker after each command: on a 2-core host
 * that fork shared the CPU with the next sample and added a third to it). Both drivers' rows wait the
 * same; the API rows wait for the refill in the same spirit. NUBE_BENCH_SETTLE_MS=0 measures them back to back.
 */
const SETTLE_MS = Number(process.env.NUBE_BENCH_SETTLE_MS ?? 300);

/**
 * A pool hit at the driver: a sandbox started ahead, which answered one `exec true` as the pool's do
 * before they enter it, is claimed (env, limits), then runs `true`; samples SETTLE_MS apart.
 */
async function claimExecSamples(rt: SandboxRuntime, n: number): Promise<number[]> {
  const ids = Array.from({ length: n }, nextId);
  for (const id of ids) {
    await rt.create({ id });
    await rt.exec(id, 'true');
  }
  const samples: number[] = [];
  for (const id of ids) {
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    samples.push(
      await time(async () => {
        await rt.claim(id, { env: { HOLDER: id }, limits: { memoryMb: 300 } });
        await rt.exec(id, 'true');
      }),
    );
  }
  for (const id of ids) await rt.destroy(id);
  return samples;
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
/** A fork of `id` into one child, timed; the child and its snapshot go before the next sample. */
async function forkSamples(rt: NamespacesRuntime, id: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const kid = nextId();
    let snap = '';
    out.push(
      await time(async () => {
        const [k] = await rt.fork(id, [kid]);
        snap = k!.layers[0]!;
      }),
    );
    await rt.destroy(kid);
    await rt.deleteSnapshot(snap);
  }
  return out;
}

async function snapshotSamples(rt: NamespacesRuntime, id: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let snap = '';
    out.push(
      await time(async () => {
        snap = (await rt.snapshot(id)).id;
      }),
    );
    await rt.deleteSnapshot(snap);
  }
  return out;
}

/** The same fork with NUBE_SANDBOX_STORE=copy (the data dir's ext4 as it is: what a fork cost before the store). */
async function copyStoreForkRow(): Promise<void> {
  const dir = `${ROOT}/bench-copy-${process.pid}`;
  const rt = new NamespacesRuntime({ ...runtimeOptions(dir), store: 'copy' });
  try {
    const id = nextId();
    await rt.create({ id });
    await rt.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
    row('runtime: fork (parent wrote 100 MB), NUBE_SANDBOX_STORE=copy', await forkSamples(rt, id, 3), '-', undefined, {
      store: rt.storeStatus?.kind,
    });
  } finally {
    for (const s of await rt.list()) await rt.destroy(s.id).catch(() => {});
    await rt.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(rt.runDir, { recursive: true, force: true });
  }
}

async function gvisorRows(): Promise<void> {
  const gvDir = `${ROOT}/bench-gvisor-${process.pid}`;
  const gv = new GvisorRuntime(runtimeOptions(gvDir));
  try {
    row('gvisor: create -> first exec', await createExecSamples(gv, 10), '- (targets are for the default driver)');
    const hits = await claimExecSamples(gv, 8);
    row('gvisor: pool hit (claim) -> first exec', hits, '<= 3x namespaces pool hit', 3 * nsClaimP50, {
      vsNamespacesPoolHit: round(percentile(hits, 50) / nsClaimP50),
    });
    const id = nextId();
    await gv.create({ id });
    const execs: number[] = [];
    for (let i = 0; i < 50; i++) execs.push(await time(() => gv.exec(id, 'true')));
    row('gvisor: exec true', execs, '-');
    await gv.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
    row('gvisor: fork (parent wrote 100 MB)', await forkSamples(gv, id, 3), '-', undefined, { store: gv.storeStatus?.kind });
    // The same after root inside killed the exec agent: every command by `runsc exec` (the fallback,
    // and how every exec went before the agent).
    await gv.exec(id, 'kill -9 $(pgrep -x nube-agent | grep -vx 1)');
    await gv.exec(id, 'true');
    const viaRunsc: number[] = [];
    for (let i = 0; i < 30; i++) viaRunsc.push(await time(() => gv.exec(id, 'true')));
    row('gvisor: exec true, runsc exec (agent killed inside)', viaRunsc, '-');
    const resumes: number[] = [];
    for (let i = 0; i < 3; i++) {
      await gv.suspend(id);
      resumes.push(await time(() => gv.resume(id)));
    }
    row('gvisor: resume', resumes, '-');
    const kept = await keepMemorySamples(gv, id, 5);
    row('gvisor: suspend keeping memory (runsc pause)', kept.suspends, '-');
    row('gvisor: resume keeping memory (runsc resume) -> exec', kept.resumes, '-');
  } finally {
    for (const s of await gv.list()) await gv.destroy(s.id).catch(() => {});
    await gv.detachStore();
    rmSync(gvDir, { recursive: true, force: true });
    rmSync(gv.runDir, { recursive: true, force: true });
  }
}

/** Suspend with keepMemory (processes frozen in place) and resume until an exec answers. */
async function keepMemorySamples(rt: NamespacesRuntime, id: string, n: number) {
  const suspends: number[] = [];
  const resumes: number[] = [];
  for (let i = 0; i < n; i++) {
    suspends.push(await time(() => rt.suspend(id, { keepMemory: true })));
    resumes.push(await time(async () => {
      await rt.resume(id);
      await rt.exec(id, 'true');
    }));
  }
  return { suspends, resumes };
}

const load0 = loadavg().map(round).join(', ');
console.log(`load average at the start: ${load0}`);
try {
  const tpl = await time(() => runtime.ensureTemplate('base', (l) => console.log(l)));
  const bare: number[] = [];
  for (let i = 0; i < 30; i++) bare.push(await time(bwrapTrue));
  bareP50 = percentile(bare, 50);
  row(BARE, bare, '-');

  row('runtime: create -> first exec', await createExecSamples(runtime, 20), '<= 4x bare', 4 * bareP50);
  const claims = await claimExecSamples(runtime, 20);
  nsClaimP50 = percentile(claims, 50);
  row('runtime: pool hit (claim) -> first exec', claims, '-');

  const id = nextId();
  await runtime.create({ id });
  const execs: number[] = [];
  for (let i = 0; i < 200; i++) execs.push(await time(() => runtime.exec(id, 'true')));
  row('runtime: exec true', execs, '<= 0.25x bare', 0.25 * bareP50);
  const prof = await execProfile(runtime, id, 60);
  row('exec profile: spawner, /bin/true, no cgroup joined', prof.none!, '-');
  row('exec profile: + the sandbox cgroups joined (3 on v1)', prof.joins!, '-');
  row("exec profile: + the exec's own pids cgroup", prof.execCgroup!, '-');
  row('exec profile: + /bin/sh -c (= runtime exec minus Node)', prof.shell!, '-');

  await apiRows();
  await apiPoolRows();

  await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
  row('runtime: snapshot (parent wrote 100 MB)', await snapshotSamples(runtime, id, 5), '-');
  row('runtime: fork (parent wrote 100 MB)', await forkSamples(runtime, id, 5), '<= 4x bare', 4 * bareP50, {
    store: runtime.storeStatus?.kind,
  });
  await copyStoreForkRow();

  const resumes: number[] = [];
  for (let i = 0; i < 5; i++) {
    await runtime.suspend(id);
    resumes.push(await time(() => runtime.resume(id)));
  }
  row('runtime: resume', resumes, '<= 4x bare', 4 * bareP50);
  const kept = await keepMemorySamples(runtime, id, 10);
  row('runtime: suspend keeping memory (freeze)', kept.suspends, '-');
  row('runtime: resume keeping memory (thaw) -> exec', kept.resumes, '<= 1x bare', bareP50);
  await runtime.destroy(id);

  const many = Array.from({ length: DENSITY }, nextId);
  const d = await density(runtime, many);
  row(`runtime: ${DENSITY} idle at once, ${d.answered}/${DENSITY} answered exec`, d.execSamples, `${DENSITY}/${DENSITY}`, undefined, {
    pass: d.answered === DENSITY,
    createAllMs: d.createMs,
    hostMbPerIdleSandbox: d.hostMbPerSandbox,
    cgroupMbPerIdleSandbox: d.cgroupMbPerSandbox,
    driverRssGrowthMb: d.driverRssGrowthMb,
    driverHeapGrowthMb: d.driverHeapGrowthMb,
  });
  for (const m of many) await runtime.destroy(m);

  await gvisorRows();

  // Bare `bwrap true` again at the end: on a loaded host it moves during the run, so every ratio (and
  // every target stated against it) uses the median of the samples taken before and after.
  for (let i = 0; i < 30; i++) bare.push(await time(bwrapTrue));
  rebase(bare);
  printTable(rows);
  const file = writeResult(
    newResult('sandboxes', rows, [
      `Template ready in ${round(tpl)} ms (cached build). Load average at the start: ${load0}, at the end: ${loadavg().map(round).join(', ')} on this 2-core VM (other suites may run at the same time).`,
      `pool hit rows: API ones go through a nube with NUBE_SANDBOX_POOL=${BURST + 2}. The target row is a burst of ${BURST} creates back to back (each followed by its first exec), all hits from the pool filled beforehand and all within the pool's 250 ms refill delay, so no refill shares the CPU with them: like the API exec \`true\` samples it is compared with, which are back to back too (hits/misses columns). The "alone after 300 ms quiet" rows take one create at a time once the pool has refilled, and an exec \`true\` after the same quiet: a process that sat idle answers its next request slower, so that create is compared with that exec (vsApiExecAfterQuiet); runtime ones claim a sandbox created ahead that answered one exec \`true\`, as pooled ones have (runtime.claim: env and limits), then exec \`true\`, samples ${SETTLE_MS} ms apart on both drivers (so a sample does not share the CPU with the previous one's aftermath).`,
      `density: ${DENSITY} sandboxes created 4 at a time and left idle 3 s; hostMbPerIdleSandbox = drop of MemAvailable / ${DENSITY} (page cache and other helpers move it too), cgroupMbPerIdleSandbox = the sandboxes' own memory cgroups, driverRssGrowthMb / driverHeapGrowthMb = this process (the runtime, as in nube) after all answered (garbage collection moves both; RSS can shrink).`,
      'fork rows: the parent wrote 100 MB of random data and synced; one child per fork, timed from the call to the child running (its first exec not included); the child and the snapshot are deleted between samples. store column: image = upper dirs and snapshots on the sparse XFS image (reflink copies), copy = the data dir as it is (ext4 here, a full copy). snapshot row: the same copy alone, the parent frozen while it is taken.',
      `gvisor rows call GvisorRuntime directly (${RUNSC_VERSION}, ptrace platform: /dev/kvm here is nested and hangs, systrap starts processes 2.5x slower here); exec goes to the exec agent inside the sandbox (nube-agent over a host unix socket), the \`runsc exec\` row measures the fallback. The pool hit's exec is the second command of a freshly started sandbox. \`sh -c\` runs the static sh (scripts/install-static-sh.sh: Debian's dash linked statically) while the sandbox's /bin/sh is Debian's dash: ${STATIC_SH_NOTE}.`,
      'runtime rows call NamespacesRuntime directly; API rows go through nube over loopback HTTP (auth, validation, SQLite record, timers, rate limit) with a node:http keep-alive client in the same process (until 2026-11-26 the client was fetch, which spends 0.4-0.6 ms more of this process\'s CPU per request here: the `fetch client` row is the same exec through it, every third ten of the 300 samples).',
      'API create -> first exec: POST /sandboxes (template built) then POST /sandboxes/{id}/exec `true`, timed together; samples spread over 3 owners because creation is limited to 10 a minute per owner.',
      'ratio = p50 / p50 of a bare `bwrap --unshare-all ... true` in the same run (30 samples at the start and 30 at the end together; bareP50AtStartMs is the first half alone).',
    ]),
  );
  console.log(`wrote ${file}`);
} finally {
  for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
  await runtime.detachStore();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(runtime.runDir, { recursive: true, force: true });
}
