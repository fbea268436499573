// Speed target of issue 36: the Python SDK's overhead per call within 0.3 ms of a bare http.client
// request to the same endpoint (p50, same run). nube runs in this process; the Python side
// (bench/lib/python_overhead.py) sends GET /api/v2/account and a one-statement databases.query, each
// with a bare kept-alive http.client connection and through nube.Nube (and AsyncNube for the GET), in
// alternating blocks. Flags: --calls <n per block> (200), --rounds <n> (10).
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchNube } from './lib/nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';

const here = dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const num = (name: string, dflt: number) => {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(argv[i + 1]) : dflt;
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} wants a positive integer`);
  return v;
};
const CALLS = num('calls', 200);
const ROUNDS = num('rounds', 10);
const TARGET_MS = 0.3;
// Debian's python3 (the one the SDK's tests use); NUBE_PYTHON overrides.
const PYTHON = process.env.NUBE_PYTHON ?? '/usr/bin/python3';

interface Measured {
  count: number;
  p50Ms: number;
  p99Ms: number;
  throughputPerSec: number;
}

function runPython(args: string[]): Promise<Record<string, Measured> & { python: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [join(here, 'lib', 'python_overhead.py'), ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`python_overhead.py exited with ${code}`)),
    );
  });
}

const n = await startBenchNube('python', { NUBE_RATE_LIMIT_PER_MINUTE: '100000000' });
try {
  const res = await fetch(`${n.base}/api/v2/databases`, {
    method: 'POST',
    headers: { authorization: `Bearer ${n.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bench' }),
  });
  const db = (await res.json()) as { id: string };
  const m = await runPython([
    join(here, '..', 'packages', 'python', 'src'),
    n.base,
    n.key,
    db.id,
    String(CALLS),
    String(ROUNDS),
  ]);
  const row = (name: string, key: string, floorName?: string, floorKey?: string): ResultRow => {
    const v = m[key]!;
    const r: ResultRow = {
      name,
      p50Ms: v.p50Ms,
      p99Ms: v.p99Ms,
      throughputPerSec: v.throughputPerSec,
      calls: v.count,
    };
    if (floorName && floorKey) {
      const f = m[floorKey]!;
      const overhead = v.p50Ms - f.p50Ms;
      Object.assign(r, {
        ratio: v.p50Ms / f.p50Ms,
        ratioAgainst: floorName,
        overheadP50Ms: overhead,
        target: `p50 <= bare + ${TARGET_MS} ms`,
        pass: overhead <= TARGET_MS,
      });
    }
    return r;
  };
  const bareGet = 'bare http.client GET /api/v2/account';
  const bareQuery = 'bare http.client POST databases/{id}/query';
  const rows: ResultRow[] = [
    row(bareGet, 'bare GET'),
    row('Nube().account.get()', 'sdk GET', bareGet, 'bare GET'),
    row('AsyncNube().account.get()', 'async GET', bareGet, 'bare GET'),
    row(bareQuery, 'bare query'),
    row('Nube().databases.query(id, sql=...)', 'sdk query', bareQuery, 'bare query'),
  ];
  printTable(rows);
  const result = newResult('python', rows, [
    `Python ${m.python} (${PYTHON}); nube in the bench's Node process on loopback, SQLite; one call at a time, each contender ${CALLS} calls per block, ${ROUNDS} alternating rounds after a warm-up.`,
    'The floor is a bare http.client connection kept alive, sending the same request and reading the body (nothing parsed). The SDK rows also build the request from the operation table, parse the JSON answer and check the status, which is the overhead measured; the ratio is of p50 latencies.',
    'AsyncNube runs on asyncio streams (its own HTTP/1.1 client), one event loop, awaited one call at a time.',
  ]);
  console.log(`wrote ${writeResult(result)}`);
} finally {
  await n.close();
}
