/**
 * Blob store benchmark: a 1 GB object through the local store's put/get and through the presigned-URL
 * HTTP route (serveBlob/receiveUpload behind node:http), against fs.copyFile of the same file on the
 * same disk in the same run. The HTTP client runs in the same process, so its memory is counted too. Run: `npx tsx bench/files.ts [sizeMB]`. Writes bench/results/files.json.
 */
import { randomFillSync } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { copyFile, mkdir, mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { get, type IncomingMessage, request } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { localBackend, startBlobHttp } from '../src/blob/test-fixtures.js';

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

interface Row {
  name: string;
  seconds: number;
  mbPerSec: number;
  ratioToCopy: number;
  peakRssGrowthMb: number;
}

async function measure(fn: () => Promise<void>): Promise<{ seconds: number; peakRssGrowthMb: number }> {
  const base = process.memoryUsage().rss;
  let peak = base;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 10);
  const t0 = performance.now();
  try {
    await fn();
  } finally {
    clearInterval(timer);
  }
  const seconds = (performance.now() - t0) / 1000;
  peak = Math.max(peak, process.memoryUsage().rss);
  return { seconds, peakRssGrowthMb: (peak - base) / 2 ** 20 };
}

const src = join(root, 'source.bin');
await makeSource(src);
const http = await startBlobHttp(() => backend.stores);
const backend = await localBackend(http.baseUrl, root);
const store = backend.stores.at('US');
await mkdir(join(root, 'out'), { recursive: true });

const results: Record<string, { seconds: number; peakRssGrowthMb: number }> = {};
results['fs.copyFile'] = await measure(() => copyFile(src, join(root, 'out', 'copy.bin')));
results['fs.copyFile + fsync'] = await measure(async () => {
  await copyFile(src, join(root, 'out', 'copy2.bin'));
  const fh = await open(join(root, 'out', 'copy2.bin'), 'r+');
  await fh.sync();
  await fh.close();
});
await rm(join(root, 'out', 'copy.bin'));
await rm(join(root, 'out', 'copy2.bin'));

results['store.put (stream, sha256, fsync)'] = await measure(async () => {
  await store.put('bench/1g', createReadStream(src, { highWaterMark: 1 << 20 }), { expectedSize: SIZE });
});
results['store.get -> file'] = await measure(async () => {
  const got = await store.get('bench/1g');
  await pipeline(got.stream, createWriteStream(join(root, 'out', 'get.bin')));
});
await rm(join(root, 'out', 'get.bin'));

results['HTTP presigned PUT'] = await measure(async () => {
  const url = await store.presign('bench/http', { method: 'PUT', expiresInSeconds: 600, size: SIZE });
  const req = request(url, { method: 'PUT', headers: { 'content-length': String(SIZE) } });
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
results['HTTP presigned GET -> file'] = await measure(async () => {
  const url = await store.presign('bench/http', { method: 'GET', expiresInSeconds: 600 });
  const res = await new Promise<IncomingMessage>((resolve, reject) => get(url, resolve).once('error', reject));
  if (res.statusCode !== 200) throw new Error(`GET answered ${res.statusCode}`);
  await pipeline(res, createWriteStream(join(root, 'out', 'http.bin')));
});

const copy = results['fs.copyFile'].seconds;
const rows: Row[] = Object.entries(results).map(([name, m]) => ({
  name,
  seconds: Number(m.seconds.toFixed(3)),
  mbPerSec: Number((sizeMb / m.seconds).toFixed(1)),
  ratioToCopy: Number((copy / m.seconds).toFixed(3)),
  peakRssGrowthMb: Number(m.peakRssGrowthMb.toFixed(1)),
}));
console.log(`\nblob store, ${sizeMb} MB object, same disk, same run (ratio = copyFile time / this time)\n`);
console.log(['operation'.padEnd(36), 'seconds'.padStart(8), 'MB/s'.padStart(8), 'ratio'.padStart(7), 'RSS+MB'.padStart(8)].join(' '));
for (const r of rows) {
  console.log(
    [r.name.padEnd(36), String(r.seconds).padStart(8), String(r.mbPerSec).padStart(8), String(r.ratioToCopy).padStart(7), String(r.peakRssGrowthMb).padStart(8)].join(' '),
  );
}
await mkdir('bench/results', { recursive: true });
await writeFile(
  'bench/results/files.json',
  `${JSON.stringify({ date: new Date().toISOString(), node: process.version, sizeMb, rows }, null, 2)}\n`,
);
http.server.close();
await backend.close();
await rm(root, { recursive: true, force: true });
