// Templates benchmark: `npm run bench -- templates` (NUBE_BENCH_DRIVERS=namespaces,gvisor, the default,
// runs each driver in turn in one run). A real registry on loopback (docker-registry) with a busybox
// image and a ~200 MB image of 3 layers (files of this host's /usr) the bench makes, a nube in this
// process per driver, and:
// - a pull and unpack of the 200 MB image (POST /templates -> ready, nube's blob cache emptied before
//   each) against `skopeo copy` of it to a directory plus `tar -x` of its layers, one after the other;
// - a Dockerfile of 12 steps rebuilt with its last line changed: rebuild -> ready, less the changed
//   step's own time (from the build log) = what nube adds (target: under 2 s);
// - E2B's SDK: Template.build of an unchanged template against nube's own rebuild of it;
// - a template whose start command serves a port: POST /sandboxes (which waits for its ready command)
//   -> the port answering from inside, against POST /sandboxes of `base` -> exec `true`, in one run.
// Writes bench/results/templates.json.
import { execFileSync } from 'node:child_process';
import { gzipSync } from 'node:zlib';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Template } from 'e2b';
import { busyboxLayer, pushImage, startRegistry, tarOf, type TarEntry } from '../test/templates/registry.js';
import { BENCH_ROOT, startSandboxNube } from './lib/sandbox-nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { percentile, round } from './lib/stats.js';

const DRIVERS = (process.env.NUBE_BENCH_DRIVERS ?? process.env.NUBE_BENCH_DRIVER ?? 'namespaces,gvisor').split(',');
const N = Number(process.env.NUBE_BENCH_N ?? 5);
const PULL_N = Number(process.env.NUBE_BENCH_PULL_N ?? 3);
const LAYER_BYTES = 70 * 1024 * 1024;

/** Regular files under `dirs` of this host, up to `max` bytes, as tar entries under their own paths. */
function hostFiles(dirs: string[], max: number): TarEntry[] {
  const out: TarEntry[] = [];
  let n = 0;
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      if (n >= max) return;
      const path = `${dir}/${name}`;
      const st = lstatSync(path);
      if (st.isDirectory()) walk(path);
      else if (st.isFile() && st.size < 20 * 1024 * 1024) {
        out.push({ name: path.slice(1), content: readFileSync(path), mode: st.mode & 0o777 });
        n += st.size;
      }
    }
  };
  for (const d of dirs) walk(d);
  return out;
}

const reg = await startRegistry();
pushImage(
  reg.host,
  'bench/bb',
  'v1',
  [
    {
      tar: await busyboxLayer(),
      compression: 'gzip',
    },
  ],
  { Env: ['PATH=/bin'] },
);
const image = `${reg.host}/bench/bb:v1`;
const bigLayers = [
  ['/usr/lib/x86_64-linux-gnu'],
  ['/usr/share'],
  ['/usr/bin', '/usr/sbin', '/usr/libexec', '/usr/lib/python3'],
].map((dirs) => hostFiles(dirs, LAYER_BYTES));
const bigBytes = bigLayers.flat().reduce((n, e) => n + (e.content as Buffer).length, 0);
pushImage(
  reg.host,
  'bench/big',
  'v1',
  await Promise.all(bigLayers.map(async (entries) => ({ tar: await tarOf(entries), compression: 'gzip' as const }))),
  { Env: ['PATH=/usr/bin:/bin'] },
);
bigLayers.length = 0;
const bigImage = `${reg.host}/bench/big:v1`;
const rows: ResultRow[] = [];

for (const DRIVER of DRIVERS) {
  // NUBE_BENCH_BRIDGE: another bridge, so two runs on one host (two worktrees) do not share one.
  const { nube, key, dataDir, baseUrl } = await startSandboxNube('templates', process.env.NUBE_BENCH_BRIDGE ?? 'nubet0:10.83.0.1/16', {
    NUBE_SANDBOX_DRIVER: DRIVER,
    NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin,
    NUBE_JOB_POLL_MS: '20',
    // The bench polls a build's status every 10 ms.
    NUBE_RATE_LIMIT_PER_MINUTE: '100000',
    NUBE_SANDBOX_POOL: '0',
  });
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${baseUrl}/api/v2${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = (await r.json().catch(() => ({}))) as Record<string, any>;
    if (r.status !== 200 && r.status !== 201) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(json)}`);
    return json;
  };
  const ready = async (id: string) => {
    for (;;) {
      const t = await api('GET', `/templates/${id}`);
      if (t.status !== 'building') {
        if (t.status !== 'ready') throw new Error(`template ${id}: ${t.status} ${t.error}`);
        return t;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  try {
    // Pull and unpack: nube (its blob cache emptied first) against skopeo copy + tar -x.
    const nubePull: number[] = [];
    const byHand: number[] = [];
    let pulledBytes = 0;
    for (let i = 0; i < PULL_N; i++) {
      rmSync(`${dataDir}/oci`, { recursive: true, force: true });
      let s0 = performance.now();
      const t = await api('POST', '/templates', { name: `big${i}`, fromImage: bigImage });
      const got = await ready(t.id);
      nubePull.push(performance.now() - s0);
      pulledBytes = got.sizeBytes;
      await api('DELETE', `/templates/${t.id}`);
      // On the filesystem nube's templates are on.
        const work = mkdtempSync(join(BENCH_ROOT, 'bench-skopeo-'));
      try {
        s0 = performance.now();
        execFileSync('skopeo', ['copy', '--quiet', '--src-tls-verify=false', `docker://${bigImage}`, `dir:${work}/img`], { stdio: 'pipe' });
        const manifest = JSON.parse(readFileSync(`${work}/img/manifest.json`, 'utf8')) as { layers: { digest: string }[] };
        mkdirSync(`${work}/rootfs`);
        for (const l of manifest.layers)
          execFileSync('tar', ['-x', '-f', `${work}/img/${l.digest.slice('sha256:'.length)}`, '-C', `${work}/rootfs`], { stdio: 'pipe' });
        byHand.push(performance.now() - s0);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    }
    const handP50 = percentile(byHand, 50);
    rows.push({ name: `skopeo copy to a dir + tar -x of its 3 layers (${Math.round(bigBytes / 1048576)} MiB image)`, p50Ms: handP50, p99Ms: percentile(byHand, 99), n: byHand.length });
    rows.push({
      name: `POST /templates fromImage -> ready: pull + unpack, blob cache empty (${DRIVER})`,
      p50Ms: percentile(nubePull, 50),
      p99Ms: percentile(nubePull, 99),
      n: nubePull.length,
      ratio: round(percentile(nubePull, 50) / handP50),
      ratioAgainst: 'skopeo copy + tar -x',
      target: '<= 1.5x',
      pass: percentile(nubePull, 50) <= 1.5 * handP50,
      unpackedMiB: round(pulledBytes / 1048576),
    });

    // The context, uploaded as a file.
    const context = gzipSync(
      await tarOf([
        { name: 'app/index.html', content: '<h1>hi</h1>\n' },
        { name: 'app/run.sh', content: '#!/bin/sh\necho run\n', mode: 0o755 },
      ]),
    );
    const f = await api('POST', '/files', { fileName: 'ctx.tar.gz', contentType: 'application/gzip', size: context.length });
    await fetch(f.putUrl, { method: 'PUT', body: context });
    const dockerfile = (last: string) =>
      [
        `FROM ${image}`,
        'ARG V=1',
        'ENV APP=/srv/app',
        'WORKDIR $APP',
        'COPY app/ ./',
        'RUN echo one > one.txt',
        'RUN echo two > two.txt',
        'RUN chown -R app:app /srv/app',
        'USER app',
        'RUN id -u > /home/app/uid',
        'EXPOSE 8080',
        'CMD ["httpd", "-f", "-p", "8080", "-h", "/srv/app"]',
        last,
      ].join('\n');
    const t0 = Date.now();
    const tpl = await api('POST', '/templates', {
      name: 'df',
      dockerfile: dockerfile('RUN echo 0 > /home/app/last'),
      context: f.file.id,
    });
    await ready(tpl.id);
    const firstMs = Date.now() - t0;
    const totals: number[] = [];
    const steps: number[] = [];
    const overheads: number[] = [];
    for (let i = 1; i <= N; i++) {
      const started = performance.now();
      await api('POST', `/templates/${tpl.id}/rebuild`, { dockerfile: dockerfile(`RUN echo ${i} > /home/app/last`) });
      await ready(tpl.id);
      const total = performance.now() - started;
      const logs = await (await fetch(`${baseUrl}/api/v2/templates/${tpl.id}/build-logs`, { headers: { authorization: `Bearer ${key}` } })).text();
      const m = /step 12\/12 done in ([\d.]+) s/.exec(logs);
      if (!m || !/1 steps built, 5 cached/.test(logs)) throw new Error(`rebuild ${i} did not reuse the cached steps:\n${logs}`);
      totals.push(total);
      steps.push(Number(m[1]) * 1000);
      overheads.push(total - Number(m[1]) * 1000);
    }
    rows.push({
      name: `Dockerfile rebuild, last of 12 steps changed (${DRIVER}): rebuild -> ready`,
      p50Ms: percentile(totals, 50),
      p99Ms: percentile(totals, 99),
      n: N,
      target: 'under 2 s plus the step',
    });
    rows.push({ name: `  of which the changed RUN step (build sandbox, run, snapshot) (${DRIVER})`, p50Ms: percentile(steps, 50), p99Ms: percentile(steps, 99), n: N });
    rows.push({
      name: `  nube around it (parse, 5 cached steps, image check, job, status) (${DRIVER})`,
      p50Ms: percentile(overheads, 50),
      p99Ms: percentile(overheads, 99),
      n: N,
      target: '< 2000 ms',
      pass: percentile(overheads, 50) < 2000,
    });
    rows.push({ name: `  first build of the same Dockerfile (6 steps run) (${DRIVER})`, p50Ms: firstMs, n: 1 });

    // E2B's SDK: Template.build of a template with nothing changed, against nube's own rebuild of it.
    process.env.E2B_API_URL = `${baseUrl}/e2b`;
    process.env.E2B_SANDBOX_URL = baseUrl;
    process.env.E2B_API_KEY = key;
    const ctxDir = mkdtempSync(join(tmpdir(), 'nube-bench-e2b-'));
    writeFileSync(join(ctxDir, 'index.html'), '<h1>hi</h1>\n');
    const e2b = () =>
      Template({ fileContextPath: ctxDir })
        .fromImage(image)
        .setEnvs({ APP: '/srv/app' })
        .setWorkdir('/srv/app')
        .copy('index.html', 'index.html')
        .runCmd('echo one > one.txt')
        .runCmd('echo two > two.txt');
    await Template.build(e2b(), 'e2b-bench');
    const sdk: number[] = [];
    const own: number[] = [];
    for (let i = 0; i < N; i++) {
      let s0 = performance.now();
      const logs: string[] = [];
      await Template.build(e2b(), { alias: 'e2b-bench', onBuildLogs: (l) => logs.push(l.message) });
      sdk.push(performance.now() - s0);
      if (!logs.some((l) => /^0 steps built/.test(l))) throw new Error(`an unchanged E2B build ran steps:\n${logs.join('\n')}`);
      s0 = performance.now();
      await api('POST', '/templates/e2b-bench/rebuild', {});
      await ready('e2b-bench');
      own.push(performance.now() - s0);
    }
    rows.push({ name: `nube's own rebuild of that template, nothing changed (POST /templates/{id}/rebuild -> ready, polled every 10 ms) (${DRIVER})`, p50Ms: percentile(own, 50), p99Ms: percentile(own, 99), n: N });
    rows.push({
      name: `E2B SDK Template.build of the same template, nothing changed (uploads skipped, every step cached) (${DRIVER})`,
      p50Ms: percentile(sdk, 50),
      p99Ms: percentile(sdk, 99),
      n: N,
      ratio: round(percentile(sdk, 50) / percentile(own, 50)),
      ratioAgainst: "nube's own rebuild",
    });
    await api('DELETE', '/templates/e2b-bench');
    rmSync(ctxDir, { recursive: true, force: true });

    // A template with a start command, against `base`.
    const svc = await api('POST', '/templates', {
      name: 'svc',
      fromImage: image,
      startCmd: 'echo up > /tmp/ok && exec httpd -f -p 9000 -h /tmp',
      readyCmd: 'wget -q -O /dev/null http://127.0.0.1:9000/ok',
    });
    await ready(svc.id);
    const plain = await api('POST', '/templates', { name: 'plain', fromImage: image });
    await ready(plain.id);
    const base: number[] = [];
    const started: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < Math.min(N, 3); i++) {
      let s0 = performance.now();
      const b = await api('POST', '/sandboxes', { template: 'base' });
      await api('POST', `/sandboxes/${b.id}/exec`, { command: 'true' });
      base.push(performance.now() - s0);
      await api('DELETE', `/sandboxes/${b.id}`);
      s0 = performance.now();
      const s = await api('POST', '/sandboxes', { template: 'svc' });
      const r = await api('POST', `/sandboxes/${s.id}/exec`, { command: 'wget -q -O - http://127.0.0.1:9000/ok' });
      if (r.stdout !== 'up\n') throw new Error(`the port did not answer: ${JSON.stringify(r)}`);
      started.push(performance.now() - s0);
      await api('DELETE', `/sandboxes/${s.id}`);
      s0 = performance.now();
      const p = await api('POST', '/sandboxes', { template: 'plain' });
      await api('POST', `/sandboxes/${p.id}/exec`, { command: 'true' });
      bare.push(performance.now() - s0);
      await api('DELETE', `/sandboxes/${p.id}`);
    }
    const baseP50 = percentile(base, 50);
    rows.push({ name: `POST /sandboxes base -> exec true (${DRIVER})`, p50Ms: baseP50, p99Ms: percentile(base, 99), n: base.length });
    rows.push({
      name: `POST /sandboxes of a template with startCmd (waits for readyCmd) -> its port answers (${DRIVER})`,
      p50Ms: percentile(started, 50),
      p99Ms: percentile(started, 99),
      n: started.length,
      ratio: round(percentile(started, 50) / baseP50),
      ratioAgainst: 'base create -> exec',
      target: '<= 2x base',
      pass: percentile(started, 50) <= 2 * baseP50,
    });
    rows.push({
      name: `  the same image without a start command: POST /sandboxes -> exec true (${DRIVER})`,
      p50Ms: percentile(bare, 50),
      p99Ms: percentile(bare, 99),
      n: bare.length,
      ratio: round(percentile(bare, 50) / baseP50),
      ratioAgainst: 'base create -> exec',
    });
    for (const t of [svc.id, plain.id, tpl.id]) await api('DELETE', `/templates/${t}`);
  } finally {
    await nube.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
reg.stop();

printTable(rows);
const file = writeResult(
  newResult('templates', rows, [
    `Drivers ${DRIVERS.join(', ')} one after the other in one run; images in docker-registry on loopback; ${N} rebuild samples, ${PULL_N} pulls per driver; no warm pool.`,
    `The pull image: 3 gzip layers of this host's files (${Math.round(bigBytes / 1048576)} MiB of files); nube's blob cache is emptied before each pull; the baseline runs skopeo copy (docker:// to dir:) then GNU tar -x of each layer into one directory, as root, right after.`,
    'The start command runs at each sandbox start (processes cannot be snapshotted here: CRIU does not work on this kernel), and POST /sandboxes answers once the ready command succeeds.',
    'The rebuild row includes the image check against the registry (manifest HEAD/GET) and the job queue pickup (poll 20 ms).',
    "E2B rows: the SDK's setEnvs, setWorkdir, copy of an uploaded file and 2 runCmd from the same image, 12 Dockerfile steps of which 5 change files (nube's set-up of `user`, the working dir, the copy, the 2 RUNs); the SDK asks for a build, asks whether the file is uploaded, starts the build and polls its status every 200 ms (its own logsRefreshFrequency), so its p50 includes up to one poll interval.",
  ]),
);
console.log(`wrote ${file}`);
