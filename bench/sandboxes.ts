// Sandbox runtime benchmark (namespaces driver): `npx tsx bench/sandboxes.ts`.
// Prints a table and writes bench/results/sandboxes.json. Ratios are against a bare `bwrap true`
// (the physical floor of starting a namespaced process) timed in the same run.
import { spawn } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { NamespacesRuntime } from '../src/areas/sandboxes/runtime/namespaces/runtime.js';

const ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';
const dataDir = `${ROOT}/bench-${process.pid}`;
const runtime = new NamespacesRuntime({
  dataDir,
  templatesDir: `${ROOT}/templates`,
  bridge: { name: 'nubeb0', cidr: '10.79.0.1/16' },
  cgroupParent: 'nube-bench',
  defaultLimits: { memoryMb: 256, cpus: 1, pids: 256 },
});

const pct = (v: number[], p: number) => [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor((p / 100) * v.length))];
const round = (n: number) => Math.round(n * 10) / 10;
const time = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};
const bwrapTrue = () =>
  new Promise<void>((resolve, reject) => {
    const c = spawn('bwrap', ['--unshare-all', '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', 'true']);
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bwrap exited ${code}`))));
  });

const rows: { metric: string; n: number; p50: number; p99: number; target: string; ratio?: number }[] = [];
let seq = 0;
const nextId = () => `bench-${process.pid.toString(36)}-${seq++}`;

try {
  const tpl = await time(() => runtime.ensureTemplate('base', (l) => console.log(l)));
  const bare: number[] = [];
  for (let i = 0; i < 30; i++) bare.push(await time(bwrapTrue));
  const bareP50 = pct(bare, 50);
  rows.push({ metric: 'bare bwrap true', n: bare.length, p50: bareP50, p99: pct(bare, 99), target: '-' });

  await runtime.create({ id: nextId() }).then((s) => runtime.destroy(s.id)); // warm: helper, bridge
  const createExec: number[] = [];
  for (let i = 0; i < 20; i++) {
    const id = nextId();
    createExec.push(
      await time(async () => {
        await runtime.create({ id });
        await runtime.exec(id, 'true');
      }),
    );
    await runtime.destroy(id);
  }
  rows.push({ metric: 'create -> first exec', n: 20, p50: pct(createExec, 50), p99: pct(createExec, 99), target: '< 150 ms' });

  const id = nextId();
  await runtime.create({ id });
  const execs: number[] = [];
  for (let i = 0; i < 200; i++) execs.push(await time(() => runtime.exec(id, 'true')));
  rows.push({ metric: 'exec true', n: 200, p50: pct(execs, 50), p99: pct(execs, 99), target: '< 15 ms' });

  await runtime.exec(id, 'head -c 100000000 /dev/urandom > /root/big && sync');
  const forks: number[] = [];
  for (let i = 0; i < 3; i++) {
    const kid = nextId();
    let snap = '';
    forks.push(
      await time(async () => {
        const [k] = await runtime.fork(id, [kid]);
        snap = k.layers[0];
      }),
    );
    await runtime.destroy(kid);
    await runtime.deleteSnapshot(snap);
  }
  rows.push({ metric: 'fork (parent wrote 100 MB)', n: 3, p50: pct(forks, 50), p99: pct(forks, 99), target: '< 1000 ms' });

  const resumes: number[] = [];
  for (let i = 0; i < 5; i++) {
    await runtime.suspend(id);
    resumes.push(await time(() => runtime.resume(id)));
  }
  rows.push({ metric: 'resume', n: 5, p50: pct(resumes, 50), p99: pct(resumes, 99), target: '< 300 ms' });
  await runtime.destroy(id);

  const many = Array.from({ length: 50 }, nextId);
  const startMany = performance.now();
  for (const m of many) await runtime.create({ id: m });
  const createdMs = performance.now() - startMany;
  const answers = await Promise.all(many.map((m) => runtime.exec(m, 'hostname')));
  const ok = answers.filter((a, i) => a.stdout.trim() === many[i]).length;
  const perExec = answers.map((a) => a.durationMs);
  rows.push({ metric: `50 at once: ${ok}/50 answered exec`, n: 50, p50: pct(perExec, 50), p99: pct(perExec, 99), target: '50/50' });
  for (const m of many) await runtime.destroy(m);

  for (const r of rows) r.ratio = round(r.p50 / bareP50);
  console.log(`\nsandboxes benchmark (${cpus().length} cores; template ready in ${round(tpl)} ms)`);
  console.table(rows.map((r) => ({ ...r, p50: round(r.p50), p99: round(r.p99) })));
  await mkdir('bench/results', { recursive: true });
  await writeFile(
    'bench/results/sandboxes.json',
    JSON.stringify(
      {
        date: new Date().toISOString(),
        cores: cpus().length,
        loadavg: (await import('node:os')).loadavg(),
        create50SequentialMs: round(createdMs),
        rows: rows.map((r) => ({ ...r, p50: round(r.p50), p99: round(r.p99) })),
      },
      null,
      2,
    ),
  );
} finally {
  for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
  await rm(dataDir, { recursive: true, force: true });
}
