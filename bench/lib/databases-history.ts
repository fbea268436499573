// Rows of issue 35 (database history) for bench/databases.ts --history: a large database taking single-row
// writes at a steady rate while its WAL is shipped (bytes put in the blob store per second), write p50 with
// shipping on against the same writes with shipping held off, and a restore to a point against the
// physical floor: reading and unpacking the same snapshot and segments from the (local) blob store.
import { execFileSync } from 'node:child_process';
import { createReadStream, createWriteStream, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import type { ChildProcess } from 'node:child_process';
import { HEADER_SIZE } from '../../src/blob/local-format.js';
import type { ResultRow } from './result.js';
import { round } from './stats.js';

type Start = (env: Record<string, string>) => Promise<{ address: string; child: ChildProcess }>;

interface Opts {
  /** Size of the large database (MB). */
  mb: number;
  /** Seconds of writes at `rate` per second. */
  seconds: number;
  rate: number;
}

/** Every file under `dir` (recursively) with its size. */
function files(dir: string): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  let entries: string[] = [];
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = join(dir, e);
    const s = statSync(p);
    if (s.isDirectory()) out.push(...files(p));
    // Each object of the local store is a 4 KB header (content type, hash) and the bytes put.
    else out.push({ path: p, size: s.size - HEADER_SIZE });
  }
  return out;
}

function historyDir(dataDir: string, id: string): string {
  const hits = execFileSync('find', [dataDir, '-type', 'd', '-path', `*database-history/${id}`], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  if (!hits[0]) throw new Error(`no history directory for ${id} under ${dataDir}`);
  return hits[0];
}

async function writesAtRate(call: (sql: string, args: unknown[]) => Promise<void>, rate: number, seconds: number, rows: number): Promise<number[]> {
  const lat: number[] = [];
  const start = performance.now();
  const n = Math.round(rate * seconds);
  for (let i = 0; i < n; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const t0 = performance.now();
    await call('UPDATE big SET n = n + 1 WHERE id = ?', [1 + Math.floor(Math.random() * rows)]);
    lat.push(performance.now() - t0);
  }
  return lat.sort((a, b) => a - b);
}

const p = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? Number.NaN;

export async function historyRows(startNube: Start, env: Record<string, string> & { NUBE_OWNER_KEY: string }, opts: Opts): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const headers = { authorization: `Bearer ${env.NUBE_OWNER_KEY}`, 'content-type': 'application/json' };
  const run = async (shipMs: number, fn: (api: (m: string, path: string, body?: unknown) => Promise<any>, dataDir: string) => Promise<void>) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'nube-bench-hist-'));
    const { address, child } = await startNube({ ...env, NUBE_DATA_DIR: dataDir, NUBE_DATABASE_SHIP_MS: String(shipMs) });
    const api = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${address}/api/v2${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const j = (await r.json()) as any;
      if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
      return j;
    };
    try {
      await fn(api, dataDir);
    } finally {
      child.send('stop');
      await new Promise((r) => child.once('exit', r));
      rmSync(dataDir, { recursive: true, force: true });
    }
  };
  // 2 KB rows (two a page): `rowsBig` of them make the large database.
  const rowsBig = Math.round((opts.mb * 1024 * 1024) / 2048);
  const fill = async (api: (m: string, path: string, body?: unknown) => Promise<any>, id: string) => {
    await api('POST', `/databases/${id}/query`, { sql: 'CREATE TABLE big (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, pad BLOB)' });
    const chunk = 2500;
    for (let done = 0; done < rowsBig; done += chunk) {
      const k = Math.min(chunk, rowsBig - done);
      await api('POST', `/databases/${id}/query`, {
        sql: `WITH RECURSIVE c(x) AS (SELECT ${done + 1} UNION ALL SELECT x + 1 FROM c WHERE x < ${done + k}) INSERT INTO big SELECT x, 0, randomblob(1900) FROM c`,
      });
    }
  };
  const call = (api: (m: string, path: string, body?: unknown) => Promise<any>, id: string) => async (sql: string, args: unknown[]) => {
    await api('POST', `/databases/${id}/query`, { sql, args });
  };

  let onP50 = Number.NaN;
  let onP99 = Number.NaN;
  await run(1000, async (api, dataDir) => {
    const id = (await api('POST', '/databases', { name: 'hist-big' })).id as string;
    await fill(api, id);
    // Let the first generation (snapshot of the whole file) and the fill's segments be shipped.
    await api('POST', `/databases/${id}/bookmarks`, { name: 'filled' });
    const dir = historyDir(dataDir, id);
    const size = (await api('GET', `/databases/${id}`)).sizeBytes as number;
    const before = files(dir).reduce((a, f) => a + f.size, 0);
    const t0 = performance.now();
    const lat = await writesAtRate(call(api, id), opts.rate, opts.seconds, rowsBig);
    await api('POST', `/databases/${id}/bookmarks`, { name: 'after writes' });
    const secs = (performance.now() - t0) / 1000;
    const after = files(dir).reduce((a, f) => a + f.size, 0);
    const perSec = (after - before) / secs;
    onP50 = p(lat, 0.5);
    onP99 = p(lat, 0.99);
    rows.push({
      name: `history: bytes shipped per second, ${opts.mb} MB database (${Math.round(size / 1048576)} MB with its WAL), ${opts.rate} single-row UPDATEs/s at random rows for ${opts.seconds} s`,
      throughputPerSec: round(perSec),
      mbPerSec: round(perSec / 1048576),
      wholeCopyMbPerSec: round(size / 1048576),
      ratio: round(perSec / size),
      ratioAgainst: 'copying the whole file every second (the previous design)',
      target: '< 1 MB/s',
      pass: perSec < 1048576,
    });

    // Restore to the point after the fill against reading + unpacking the same objects from the store.
    const bms = (await api('GET', `/databases/${id}/bookmarks`)).items as { name: string; at: string }[];
    const at = bms.find((b) => b.name === 'after writes')?.at as string;
    // The floor: the generation the restore reads (the newest with a snapshot of its own; the fill's
    // segments outweighed the first snapshot, so a second one began) read from the store and gunzipped.
    const roots = readdirSync(dir)
      .filter((g) => g.startsWith('gen_'))
      .map((g) => ({ dir: join(dir, g), snap: files(join(dir, g)).find((o) => o.path.includes('snapshot.sqlite.gz')) }))
      .filter((g) => g.snap)
      .sort((a, b) => statSync(a.snap!.path).mtimeMs - statSync(b.snap!.path).mtimeMs);
    const genDir = (roots.at(-1) as { dir: string }).dir;
    const objs = files(genDir).sort((a, b) => a.path.localeCompare(b.path));
    const r0 = performance.now();
    await api('POST', `/databases/${id}/restore`, { at });
    const restoreMs = performance.now() - r0;
    const out = join(dataDir, 'floor.sqlite');
    const f0 = performance.now();
    const snap = objs.find((o) => o.path.includes('snapshot.sqlite.gz'));
    if (snap) await pipeline(createReadStream(snap.path, { start: HEADER_SIZE }), createGunzip(), createWriteStream(out));
    for (const o of objs) if (o !== snap) await pipeline(createReadStream(o.path, { start: HEADER_SIZE }), createGunzip(), createWriteStream(`${out}-seg`));
    const floorMs = performance.now() - f0;
    rows.push({
      name: `history: restore the ${opts.mb} MB database to a point (POST /restore; ${objs.length - 1} segments)`,
      p50Ms: round(restoreMs),
      ratio: round(restoreMs / floorMs),
      ratioAgainst: `reading and gunzipping its snapshot and segments from the local blob store (${round(floorMs)} ms)`,
      target: '< 1.5x',
      pass: restoreMs / floorMs < 1.5,
    });
  });

  // Write p50 with shipping held off (one ship an hour): the same writes on a small database.
  const small = async (shipMs: number) => {
    let lat: number[] = [];
    await run(shipMs, async (api) => {
      const id = (await api('POST', '/databases', { name: 'hist-small' })).id as string;
      await api('POST', `/databases/${id}/query`, { sql: 'CREATE TABLE big (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, pad BLOB)' });
      await api('POST', `/databases/${id}/query`, {
        sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) INSERT INTO big SELECT x, 0, randomblob(400) FROM c',
      });
      await new Promise((r) => setTimeout(r, 1500));
      lat = await writesAtRate(call(api, id), opts.rate, opts.seconds, 20_000);
    });
    return lat;
  };
  const off = await small(3_600_000);
  const on = await small(1000);
  rows.push({
    name: `history: single-row UPDATE p50, ${opts.rate}/s for ${opts.seconds} s, shipping every 1 s`,
    p50Ms: round(p(on, 0.5)),
    p99Ms: round(p(on, 0.99)),
    ratio: round(p(on, 0.5) / p(off, 0.5)),
    ratioAgainst: 'the same writes with shipping held off (NUBE_DATABASE_SHIP_MS=3600000)',
    target: 'within 1.1x',
    pass: p(on, 0.5) / p(off, 0.5) <= 1.1,
  });
  rows.push({ name: 'history: single-row UPDATE p50, shipping held off (baseline)', p50Ms: round(p(off, 0.5)), p99Ms: round(p(off, 0.99)) });
  rows.push({ name: `history: the same UPDATEs on the ${opts.mb} MB database, shipping every 1 s`, p50Ms: round(onP50), p99Ms: round(onP99) });
  notes.push(
    `History rows (--history): a ${opts.mb} MB database (2 KB rows, two a page) built by INSERT ... SELECT randomblob, then UPDATEs of one random row each at a steady ${opts.rate}/s; bytes shipped = growth of the database's history directory in the local blob store over the writes (segments are gzip of the WAL frames, level 1). Restore: POST /restore to the bookmark taken after the writes, against reading and gunzipping the same objects (no SQLite, no page writes). Write p50: a 20,000-row database, the same paced UPDATEs in a nube with NUBE_DATABASE_SHIP_MS=1000 and one with 3600000 (ships once at create, then not within the run).`,
  );
  return { rows, notes };
}
