/**
 * Files benchmark (issue target): upload and download of a 1 GB file through the presigned URLs of a
 * running nube (its own process, local backend), against fs.copyFile of the same file on the same
 * disk in the same run; peak RSS growth of the nube process, sampled from /proc. Also the blob store's
 * put/get in process, to separate store cost from HTTP cost.
 * Run: `npm run bench -- files [sizeMB]` (or `npx tsx bench/files.ts [sizeMB]`).
 */
import { fork } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { createReadStream, createWriteStream, readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, open, rm } from 'node:fs/promises';
import { get, type IncomingMessage, request } from 'node:http';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { localBackend } from '../src/blob/test-fixtures.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';

const here = dirname(fileURLToPath(import.meta.url));
const sizeMb = Number(process.argv[2] ?? 1024);
const SIZE = sizeMb * 2 ** 20;
const root = await mkdtemp(join(process.cwd(), 'data-bench-files-'));

async function makeSource(path: string): Promise<void> {
  const fh = await open(path, 'w');
  const chunk = Buffer.allocUnsafe(8 << 20);
  for (let off = 0; off < SIZE; off += chunk.length) {
    randomFillSync(chunk);
    await fh.write(chunk, 0, Math.min(chunk.length, SIZE - off), off);
  }
  await fh.close();
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** Wall time of `fn` and the peak RSS growth of process `pid` while it ran. */
async function measure(pid: number, fn: () => Promise<void>): Promise<{ seconds: number; rssGrowthMb: number }> {
  const base = rssOf(pid);
  let peak = base;
  const timer = setInterval(() => {
    peak = Math.max(peak, rssOf(pid));
  }, 10);
  const t0 = performance.now();
  try {
    await fn();
  } finally {
    clearInterval(timer);
  }
  peak = Math.max(peak, rssOf(pid));
  return { seconds: (performance.now() - t0) / 1000, rssGrowthMb: (peak - base) / 2 ** 20 };
}

async function startNube(dataDir: string, ownerKey: string) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NUBE_') && k !== 'DATABASE_URL'));
  const child = fork(join(here, 'lib', 'api-server.ts'), ['nube'], {
    execArgv: ['--import', 'tsx'],
    env: { ...base, NUBE_DATA_DIR: dataDir, NUBE_PORT: '0', NUBE_OWNER_KEY: ownerKey, NUBE_LOG_LEVEL: 'warn', NUBE_OWNER_PLAN: 'tera' },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const address = await new Promise<string>((resolve, reject) => {
    child.on('message', (m) => {
      const msg = m as { ready?: boolean; address?: string };
      if (msg.ready && msg.address) resolve(msg.address);
    });
    child.once('exit', (code) => reject(new Error(`nube exited with ${code}`)));
  });
  return { child, address, stop: () => new Promise<void>((r) => child.once('exit', () => r()).send('stop')) };
}

const src = join(root, 'source.bin');
await makeSource(src);
await mkdir(join(root, 'out'), { recursive: true });
const self = process.pid;

// Baseline: the physical limit on this disk, in this run.
const copy = await measure(self, () => copyFile(src, join(root, 'out', 'copy.bin')));
await rm(join(root, 'out', 'copy.bin'));

// The blob store in process (no HTTP): what the store itself costs.
const backend = await localBackend('http://127.0.0.1:1/blob', root);
const store = backend.stores.at('US');
const storePut = await measure(self, () =>
  store.put('bench/1g', createReadStream(src, { highWaterMark: 1 << 20 }), { expectedSize: SIZE }).then(() => undefined),
);
await store.delete('bench/1g');
await backend.close();

// Through a running nube: POST /files, PUT putUrl, GET /files/{id}, GET readUrl.
const ownerKey = `nube_sk_live_${randomToken(40, BASE62)}`;
const nube = await startNube(join(root, 'nube'), ownerKey);
const pid = nube.child.pid as number;
const auth = { authorization: `Bearer ${ownerKey}`, 'content-type': 'application/json' };
const created = (await (
  await fetch(`${nube.address}/api/v2/files`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ fileName: 'bench.bin', contentType: 'application/octet-stream', size: SIZE }),
  })
).json()) as { file: { id: string }; putUrl: string };
const rssBefore = rssOf(pid);
const put = await measure(pid, async () => {
  const req = request(created.putUrl, { method: 'PUT', headers: { 'content-length': String(SIZE), 'content-type': 'application/octet-stream' } });
  const answered = new Promise<number>((resolve, reject) => {
    req.once('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
  });
  await pipeline(createReadStream(src, { highWaterMark: 1 << 20 }), req);
  const status = await answered;
  if (status !== 200) throw new Error(`PUT answered ${status}`);
});
const { readUrl } = (await (await fetch(`${nube.address}/api/v2/files/${created.file.id}`, { headers: auth })).json()) as { readUrl: string };
const getRes = await measure(pid, async () => {
  const res = await new Promise<IncomingMessage>((resolve, reject) => get(readUrl, resolve).once('error', reject));
  if (res.statusCode !== 200) throw new Error(`GET answered ${res.statusCode}`);
  await pipeline(res, createWriteStream(join(root, 'out', 'http.bin')));
});
const peakGrowth = Math.max(put.rssGrowthMb, getRes.rssGrowthMb);
const rssBaseMb = rssBefore / 2 ** 20;
await nube.stop();

const mbps = (s: number) => sizeMb / s;
const row = (name: string, m: { seconds: number; rssGrowthMb: number }, target?: string, pass?: boolean): ResultRow => ({
  name,
  throughputPerSec: mbps(m.seconds),
  ratio: copy.seconds / m.seconds,
  ratioAgainst: 'fs.copyFile',
  seconds: m.seconds,
  rssGrowthMb: m.rssGrowthMb,
  target,
  pass,
});
const rows: ResultRow[] = [
  row('fs.copyFile (same disk)', copy),
  row('store.put in process (stream, sha256, fsync)', storePut),
  row('nube HTTP PUT putUrl', put, '>= 0.5x copy, RSS growth < 100 MB', copy.seconds / put.seconds >= 0.5 && put.rssGrowthMb < 100),
  row('nube HTTP GET readUrl -> file', getRes, '>= 0.5x copy, RSS growth < 100 MB', copy.seconds / getRes.seconds >= 0.5 && getRes.rssGrowthMb < 100),
];
printTable(rows);
const file = writeResult(
  newResult('files', rows, [
    `${sizeMb} MB of random bytes; throughputPerSec is MB/s; ratio = copyFile time / this time (higher is better).`,
    'nube runs in its own process (bench/lib/api-server.ts, SQLite, local backend, log level warn); RSS growth is that ' +
      `process's peak VmRSS minus its VmRSS before the transfer (baseline ${rssBaseMb.toFixed(0)} MB), sampled every 10 ms from /proc.`,
    `Peak RSS growth across upload and download: ${peakGrowth.toFixed(1)} MB.`,
    'The upload is durable before the 200: one fsync of the file and one of its directory at the end (fs.copyFile does not fsync).',
    'The client (node:http, 1 MiB reads) runs in the bench process on the same machine, competing for the same cores.',
  ]),
);
console.log(`wrote ${file}`);
await rm(root, { recursive: true, force: true });
