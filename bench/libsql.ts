// Issue #15 (libSQL): `@libsql/client` `execute` of a primary-key SELECT, p50 within 0.5 ms of nube's own
// POST /query in the same run; issue #29: the same over WebSocket (`ws://` URL, Hrana 2), within 0.3 ms.
// All go on loopback to a nube in this process (HTTP with the same fetch, undici), sequentially
// (latency) and with 8 requests in flight (throughput). The physical floor is the same SELECT on
// SQLite in this process (better-sqlite3, cached statement).
import { uptime } from 'node:os';
import { execSync } from 'node:child_process';
import { join } from 'node:path';
import { createClient } from '@libsql/client/http';
import { createClient as createWsClient } from '@libsql/client/ws';
import Database from 'better-sqlite3';
import { startBenchNube } from './lib/nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { round, summarize, timeIt } from './lib/stats.js';

const ITERATIONS = 3000;
const DURATION_MS = 4000;
const CONCURRENCY = 8;
const ROWS = 10_000;
const SQL = 'SELECT * FROM kv WHERE id = ?';
const load = () =>
  execSync('uptime')
    .toString()
    .trim()
    .replace(/.*load average:/, 'load')
    .trim();

const loadBefore = load();
const n = await startBenchNube('libsql', { NUBE_RATE_LIMIT_PER_MINUTE: '10000000' });
const headers = { authorization: `Bearer ${n.key}`, 'content-type': 'application/json' };
const post = async (path: string, body: unknown) => {
  const r = await fetch(`${n.base}/api/v2${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const out = (await r.json()) as Record<string, unknown>;
  if (r.status >= 300) throw new Error(`${path}: ${r.status} ${JSON.stringify(out)}`);
  return out;
};

try {
  const db = await post('/databases', { name: 'bench-libsql' });
  const id = db.id as string;
  await post(`/databases/${id}/query`, {
    sql: 'CREATE TABLE kv (id INTEGER PRIMARY KEY, name TEXT, score REAL, email TEXT, grp INTEGER)',
  });
  const data = Array.from({ length: ROWS }, (_, i) => [
    i + 1,
    `name-${i}`,
    i / 7,
    `u${i}@example.com`,
    i % 97,
  ]);
  await post(`/databases/${id}/query`, {
    table: 'kv',
    columns: ['id', 'name', 'score', 'email', 'grp'],
    rows: data,
  });
  const client = createClient({ url: db.libsqlUrl as string, authToken: n.key });
  const wsClient = createWsClient({ url: (db.libsqlUrl as string).replace(/^http/, 'ws'), authToken: n.key });

  const key = (i: number) => ((i * 7919) % ROWS) + 1;
  const viaQuery = async (i: number) => {
    const r = await fetch(`${n.base}/api/v2/databases/${id}/query`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ sql: SQL, args: [key(i)] }),
    });
    const body = (await r.json()) as { rows: unknown[] };
    if (body.rows.length !== 1) throw new Error('/query: no row');
  };
  const viaLibsql = async (i: number) => {
    const r = await client.execute({ sql: SQL, args: [key(i)] });
    if (r.rows.length !== 1) throw new Error('libsql: no row');
  };
  const viaWs = async (i: number) => {
    const r = await wsClient.execute({ sql: SQL, args: [key(i)] });
    if (r.rows.length !== 1) throw new Error('libsql ws: no row');
  };

  // Physical floor: the same query on SQLite in this process.
  const local = new Database(join(n.nube.deps.config.dataDir, 'baseline.sqlite'));
  local.exec('CREATE TABLE kv (id INTEGER PRIMARY KEY, name TEXT, score REAL, email TEXT, grp INTEGER)');
  const ins = local.prepare('INSERT INTO kv VALUES (?, ?, ?, ?, ?)');
  local.transaction(() => {
    for (const r of data) ins.run(...r);
  })();
  const stmt = local.prepare(SQL);
  const floor = await timeIt((i) => stmt.get(key(i)), { iterations: 200_000, warmup: 10_000, maxMs: 5000 });
  local.close();

  // Interleaved rounds, so load changes on this shared machine hit both alike.
  const q: number[] = [];
  const l: number[] = [];
  const ws: number[] = [];
  for (let round_ = 0; round_ < 6; round_++) {
    const a = await timeIt(viaQuery, { iterations: ITERATIONS / 6, warmup: round_ === 0 ? 300 : 20 });
    const b = await timeIt(viaLibsql, { iterations: ITERATIONS / 6, warmup: round_ === 0 ? 300 : 20 });
    const c = await timeIt(viaWs, { iterations: ITERATIONS / 6, warmup: round_ === 0 ? 300 : 20 });
    q.push(...a.samplesMs);
    l.push(...b.samplesMs);
    ws.push(...c.samplesMs);
  }
  const sq = summarize(q);
  const sl = summarize(l);
  const sw = summarize(ws);

  const closedLoop = async (fn: (i: number) => Promise<void>) => {
    let done = 0;
    const until = performance.now() + 1000;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, w) => {
        for (let i = w; performance.now() < until; i += CONCURRENCY) {
          await fn(i);
          done++;
        }
      }),
    );
    return (done / (performance.now() - started)) * 1000;
  };
  // Alternating 1-second windows, as above: the machine's load moves under both alike.
  let tq = 0;
  let tl = 0;
  let tw = 0;
  const windows = DURATION_MS / 1000;
  for (let w = 0; w < windows; w++) {
    tq += (await closedLoop(viaQuery)) / windows;
    tl += (await closedLoop(viaLibsql)) / windows;
    tw += (await closedLoop(viaWs)) / windows;
  }

  const tx = await timeIt(
    async (i) => {
      const t = await client.transaction('write');
      await t.execute({ sql: 'UPDATE kv SET grp = grp + 1 WHERE id = ?', args: [key(i)] });
      await t.commit();
    },
    { iterations: 300, warmup: 20, maxMs: 10_000 },
  );
  // The same write through /query (one request, one transaction): both commit with an fsync (synchronous=FULL).
  const txQuery = await timeIt(
    (i) =>
      post(`/databases/${id}/query`, {
        statements: [{ sql: 'UPDATE kv SET grp = grp + 1 WHERE id = ?', args: [key(i)] }],
      }),
    {
      iterations: 300,
      warmup: 20,
      maxMs: 10_000,
    },
  );
  client.close();
  wsClient.close();

  const floorRow = 'PK SELECT on SQLite in process (better-sqlite3, physical floor)';
  const queryRow = 'PK SELECT via POST /databases/{id}/query (sequential)';
  const rows: ResultRow[] = [
    {
      name: floorRow,
      p50Ms: round(floor.p50Ms),
      p99Ms: round(floor.p99Ms),
      throughputPerSec: round(floor.throughputPerSec),
    },
    {
      name: queryRow,
      p50Ms: round(sq.p50Ms),
      p99Ms: round(sq.p99Ms),
      throughputPerSec: round(1000 / sq.meanMs),
      ratio: round(sq.p50Ms / floor.p50Ms),
      ratioAgainst: floorRow,
    },
    {
      name: '@libsql/client execute, PK SELECT (sequential)',
      p50Ms: round(sl.p50Ms),
      p99Ms: round(sl.p99Ms),
      throughputPerSec: round(1000 / sl.meanMs),
      ratio: round(sl.p50Ms / sq.p50Ms),
      ratioAgainst: queryRow,
      p50DeltaMs: round(sl.p50Ms - sq.p50Ms),
      target: 'p50 within 0.5 ms of /query',
      pass: sl.p50Ms - sq.p50Ms <= 0.5,
    },
    {
      name: '@libsql/client execute over WebSocket, PK SELECT (sequential)',
      p50Ms: round(sw.p50Ms),
      p99Ms: round(sw.p99Ms),
      throughputPerSec: round(1000 / sw.meanMs),
      ratio: round(sw.p50Ms / sq.p50Ms),
      ratioAgainst: queryRow,
      p50DeltaMs: round(sw.p50Ms - sq.p50Ms),
      target: 'p50 within 0.3 ms of /query',
      pass: sw.p50Ms - sq.p50Ms <= 0.3,
    },
    { name: `POST /query, ${CONCURRENCY} in flight`, throughputPerSec: round(tq) },
    {
      name: `@libsql/client execute, ${CONCURRENCY} in flight`,
      throughputPerSec: round(tl),
      ratio: round(tl / tq),
      ratioAgainst: `POST /query, ${CONCURRENCY} in flight`,
    },
    {
      name: `@libsql/client execute over WebSocket, ${CONCURRENCY} in flight`,
      throughputPerSec: round(tw),
      ratio: round(tw / tq),
      ratioAgainst: `POST /query, ${CONCURRENCY} in flight`,
    },
    {
      name: 'UPDATE via POST /query (one request, commit fsyncs)',
      p50Ms: round(txQuery.p50Ms),
      p99Ms: round(txQuery.p99Ms),
      throughputPerSec: round(txQuery.throughputPerSec),
    },
    {
      name: '@libsql/client transaction(): BEGIN+UPDATE, then COMMIT (2 round trips, a stream connection opened and closed)',
      p50Ms: round(tx.p50Ms),
      p99Ms: round(tx.p99Ms),
      throughputPerSec: round(tx.throughputPerSec),
      ratio: round(tx.p50Ms / txQuery.p50Ms),
      ratioAgainst: 'UPDATE via POST /query (one request, commit fsyncs)',
    },
  ];
  printTable(rows);
  const notes = [
    `Client and nube in one process on loopback; both paths use Node's fetch. ${ITERATIONS} sequential queries each, in 6 interleaved rounds; throughput rows alternate ${DURATION_MS / 1000} windows of 1 s each.`,
    `Machine shared with other work: ${loadBefore} before, ${load()} after (uptime ${Math.round(uptime())} s).`,
    'Ratios are latency (p50) ratios for the sequential rows and throughput ratios for the in-flight rows.',
  ];
  console.log(notes.join('\n'));
  writeResult(newResult('libsql', rows, notes));
} finally {
  await n.close();
}
