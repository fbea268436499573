/**
 * Start-up benchmark (issue 17): launch to the first 200 of GET /healthz, for nube run as TypeScript
 * through tsx (`npm run dev`, and what `npm start` was) and as the built JavaScript (`node
 * dist/src/main.js serve`, and `npm start`'s path through scripts/run-built.mjs, which first hashes the
 * sources to check dist/ is current). The physical limit, measured in the same run: a bare Node
 * process that starts an http server answering /healthz, polled the same way. Each start is on a data
 * dir a first, unmeasured start has set up (the restart of a deployment); the variants take turns so
 * load changes touch them alike. Run: `npm run bench -- startup [runs]` (default 8 per variant).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { builtFingerprint, fingerprint } from '../scripts/source-fingerprint.mjs';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const RUNS = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 8);
const BARE = `require('node:http').createServer((q, s) => s.end('{"ok":true}')).listen(Number(process.env.NUBE_PORT), '127.0.0.1')`;

interface Variant {
  name: string;
  argv: string[];
}
const VARIANTS: Variant[] = [
  { name: 'bare node http server (physical limit)', argv: ['-e', BARE] },
  { name: 'nube under tsx (npm run dev; npm start before)', argv: [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), 'src/main.ts', 'serve'] },
  { name: 'nube built: node dist/src/main.js serve', argv: ['dist/src/main.js', 'serve'] },
  { name: 'npm start now: scripts/run-built.mjs serve', argv: ['scripts/run-built.mjs', 'serve'] },
];

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * CPU time (user + system, ms) used so far by `pid` and every process below it (tsx runs the server in
 * a child; nube starts database executors and parsers). Unlike wall time it hardly moves with the load
 * other processes put on the machine. From /proc: fields 14 and 15 of stat, in clock ticks (100 Hz).
 */
function treeCpuMs(pid: number): number {
  const procs = new Map<number, { ppid: number; ticks: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      procs.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // ended while listing
    }
  }
  const inTree = (p: number): boolean => p === pid || (p > 1 && procs.has(p) && inTree(procs.get(p)!.ppid));
  let ticks = 0;
  for (const [p, info] of procs) if (inTree(p)) ticks += info.ticks;
  return ticks * 10;
}

/** Starts the variant, polls /healthz every 5 ms until a 200; wall and CPU milliseconds from spawn to it. */
async function startOnce(v: Variant, dataDir: string): Promise<{ ms: number; cpuMs: number }> {
  const port = await freePort();
  const t0 = performance.now();
  const child: ChildProcess = spawn(process.execPath, v.argv, {
    cwd: ROOT,
    env: { ...process.env, NUBE_DATA_DIR: dataDir, NUBE_PORT: String(port), NUBE_LOG_LEVEL: 'silent', NUBE_LLM_GATEWAY_PORT: '0' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  try {
    for (;;) {
      if (exited) throw new Error(`${v.name} exited before answering /healthz`);
      const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) return { ms: performance.now() - t0, cpuMs: treeCpuMs(child.pid!) };
      if (performance.now() - t0 > 120_000) throw new Error(`${v.name}: no /healthz within 120 s`);
      await new Promise((r) => setTimeout(r, 5));
    }
  } finally {
    const gone = new Promise((r) => (exited ? r(undefined) : child.once('exit', r)));
    child.kill('SIGTERM');
    await gone;
  }
}

if (builtFingerprint(ROOT) !== fingerprint(ROOT)) {
  console.log('dist/ is not current: npm run build');
  execFileSync(process.execPath, [join(ROOT, 'scripts/build.mjs')], { stdio: 'inherit' });
}
const dirs = VARIANTS.map(() => mkdtempSync(join(tmpdir(), 'nube-bench-startup-')));
const samples: number[][] = VARIANTS.map(() => []);
const cpu: number[][] = VARIANTS.map(() => []);
const loadBefore = loadavg()[0]!;
try {
  // The unmeasured first start of each: migrations, the owner account, tsx's transform cache.
  for (const [i, v] of VARIANTS.entries()) await startOnce(v, dirs[i]!);
  for (let run = 0; run < RUNS; run++) {
    for (const [i, v] of VARIANTS.entries()) {
      const { ms, cpuMs } = await startOnce(v, dirs[i]!);
      samples[i]!.push(ms);
      cpu[i]!.push(cpuMs);
      console.log(`${v.name}: ${ms.toFixed(0)} ms, CPU ${cpuMs} ms`);
    }
  }
} finally {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
const loadAfter = loadavg()[0]!;

const bare = summarize(samples[0]!).p50Ms;
const rows: ResultRow[] = VARIANTS.map((v, i) => {
  const s = summarize(samples[i]!);
  return {
    name: v.name,
    p50Ms: s.p50Ms,
    p99Ms: s.p99Ms,
    minMs: s.minMs,
    throughputPerSec: 1000 / s.p50Ms,
    ...(i > 0 ? { ratio: s.p50Ms / bare, ratioAgainst: VARIANTS[0]!.name } : {}),
    cpuP50Ms: summarize(cpu[i]!).p50Ms,
    cpuRatio: summarize(cpu[i]!).p50Ms / summarize(cpu[0]!).p50Ms,
  };
});
const tsx = summarize(samples[1]!).p50Ms;
const built = summarize(samples[2]!).p50Ms;
const tsxCpu = summarize(cpu[1]!).p50Ms;
const builtCpu = summarize(cpu[2]!).p50Ms;
printTable(rows);
const file = writeResult(
  newResult('startup', rows, [
    `Launch to the first 200 of GET /healthz, ${RUNS} starts per variant taking turns, each on a data dir an unmeasured first start set up. throughputPerSec is starts per second (1000 / p50); ratio is p50 over the bare Node http server's p50 (latency: lower is better).`,
    `cpuP50Ms: CPU time (user + system) of the process tree until /healthz answered, from /proc; cpuRatio: over the bare server's. CPU time hardly depends on what else loads the machine, wall time does.`,
    `Built JavaScript starts in ${(built / tsx).toFixed(2)}x the wall time of tsx (p50 ${built.toFixed(0)} ms against ${tsx.toFixed(0)} ms) and ${(builtCpu / tsxCpu).toFixed(2)}x its CPU time (${builtCpu.toFixed(0)} ms against ${tsxCpu.toFixed(0)} ms): tsx compiles every module with esbuild at each start (its cache spares part of that).`,
    `Load average (1 min) ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after, on the shared 2-core VM.`,
  ]),
);
console.log(`wrote ${file}`);
