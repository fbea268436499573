import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { summarize } from './stats.js';

// autocannon ships no types; this is the small part of its API the benches use.
interface AutocannonInstance {
  on(event: 'response', fn: (client: unknown, statusCode: number, resBytes: number, responseTime: number) => void): void;
  on(event: 'done', fn: (result: AutocannonResult) => void): void;
  stop(): void;
}
interface AutocannonResult {
  requests: { total: number; average: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  duration: number;
  start: Date;
  finish: Date;
}
type Autocannon = (
  opts: {
    url: string;
    connections: number;
    duration?: number;
    amount?: number;
    pipelining?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    timeout?: number;
    overallRate?: number;
  },
  cb?: (err: Error | null, result: AutocannonResult) => void,
) => AutocannonInstance;

const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

export interface LoadOptions {
  url: string;
  connections: number;
  /** Seconds; the run always stops by itself. */
  durationSec: number;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** Open-loop pacing: requests per second across all connections (default: as fast as answered). */
  overallRate?: number;
}

export interface LoadResult {
  requests: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  durationSec: number;
  throughputPerSec: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
  /** Every 2xx response time in ms, for merging runs. */
  samplesMs: number[];
}

/**
 * Closed-loop load: `connections` keep-alive connections, each sending its next request when the previous
 * answer arrives, for `durationSec`. The load comes from wrk (C, one thread) so that the generator takes
 * as little of this 2-core machine as possible; autocannon (JavaScript) needed about a whole core and held
 * the bare Fastify route to a fifth of its real speed. wrk reports every latency in microseconds; the whole
 * histogram comes back, so runs can be merged exactly. Paced runs (`overallRate`) use autocannon.
 */
export function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const loopback = new URL(opts.url).hostname;
  if (loopback !== '127.0.0.1' && loopback !== 'localhost' && loopback !== '[::1]') {
    return Promise.reject(new Error(`benchmarks target loopback only, not ${loopback}`));
  }
  return opts.overallRate ? runAutocannon(opts) : runWrk(opts);
}

/** Installs wrk from Debian's packages when it is missing (benchmarks only; the server never needs it). */
function ensureWrk(): void {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') return; // wrk --version exits 1 but exists
    execFileSync('apt-get', ['install', '-y', '-qq', 'wrk'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  }
}

const luaString = (s: string) => `[==[${s}]==]`;
const QUANTILES = 1000;

/** wrk's script: the request, then at the end a summary line and the latency distribution as quantile points. */
function wrkScript(opts: LoadOptions): string {
  const lines = [`wrk.method = ${luaString(opts.method ?? 'GET')}`];
  for (const [k, v] of Object.entries(opts.headers ?? {})) lines.push(`wrk.headers[ ${luaString(k)} ] = ${luaString(v)}`);
  if (opts.body !== undefined) lines.push(`wrk.body = ${luaString(opts.body)}`);
  lines.push(
    'done = function(summary, latency, requests)',
    '  local e = summary.errors',
    '  io.write(string.format("NUBE_SUMMARY %d %d %d %d %d %d %d\\n", summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout))',
    // The histogram as QUANTILES equal-weight points (wrk's value-at-index is quadratic over a run).
    `  for k = 1, ${QUANTILES} do`,
    `    io.write(string.format("NUBE_Q %d\\n", latency:percentile((k - 0.5) * 100 / ${QUANTILES})))`,
    '  end',
    '  for _, p in ipairs({50, 90, 99}) do io.write(string.format("NUBE_P %g %d\\n", p, latency:percentile(p))) end',
    '  io.write(string.format("NUBE_MAX %d\\n", latency.max))',
    'end',
  );
  return lines.join('\n');
}

function runWrk(opts: LoadOptions): Promise<LoadResult> {
  ensureWrk();
  const dir = mkdtempSync(join(tmpdir(), 'nube-wrk-'));
  const script = join(dir, 'load.lua');
  writeFileSync(script, wrkScript(opts));
  const args = ['-t1', `-c${opts.connections}`, `-d${Math.max(1, Math.round(opts.durationSec))}s`, '--timeout', '10s', '-s', script, opts.url];
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => {
      rmSync(dir, { recursive: true, force: true });
      const summary = /NUBE_SUMMARY (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)/.exec(out);
      if (code !== 0 || !summary) return reject(new Error(`wrk exited with ${code}: ${err || out}`));
      const [durationUs, requests, connect, read, write, status, timeouts] = summary.slice(1).map(Number) as number[];
      // Each quantile point stands for an equal share of the answered requests, so runs merge by weight.
      const answered = requests! - status!;
      const weight = Math.max(1, Math.round(answered / QUANTILES));
      const samples: number[] = [];
      for (const m of out.matchAll(/NUBE_Q (\d+)/g)) for (let n = 0; n < weight; n++) samples.push(Number(m[1]) / 1000);
      const exact = (p: number) => Number(new RegExp(`NUBE_P ${p} (\\d+)`).exec(out)?.[1] ?? Number.NaN) / 1000;
      const s = summarize(samples);
      const durationSec = durationUs! / 1e6;
      resolve({
        requests: requests!,
        non2xx: status!,
        errors: connect! + read! + write!,
        timeouts: timeouts!,
        durationSec,
        throughputPerSec: (requests! - status!) / durationSec,
        p50Ms: exact(50),
        p90Ms: exact(90),
        p99Ms: exact(99),
        maxMs: Number(/NUBE_MAX (\d+)/.exec(out)?.[1]) / 1000,
        meanMs: s.meanMs,
        samplesMs: samples,
      });
    });
  });
}

/**
 * Open-loop (paced) load with autocannon, which wrk cannot pace. Latencies are taken from every 2xx
 * response at full (sub-millisecond) resolution rather than from autocannon's 1 ms histogram.
 */
function runAutocannon(opts: LoadOptions): Promise<LoadResult> {
  const loopback = new URL(opts.url).hostname;
  if (loopback !== '127.0.0.1' && loopback !== 'localhost' && loopback !== '[::1]') {
    return Promise.reject(new Error(`benchmarks target loopback only, not ${loopback}`));
  }
  const samples: number[] = [];
  return new Promise((resolve, reject) => {
    const inst = autocannon(
      {
        url: opts.url,
        connections: opts.connections,
        duration: opts.durationSec,
        method: opts.method ?? 'GET',
        headers: opts.headers,
        ...(opts.overallRate ? { overallRate: opts.overallRate } : {}),
        body: opts.body,
        timeout: 10,
      },
      (err, r) => {
        if (err) return reject(err);
        const s = summarize(samples);
        const durationSec = (r.finish.getTime() - r.start.getTime()) / 1000;
        resolve({
          requests: r.requests.total,
          non2xx: r.non2xx,
          errors: r.errors,
          timeouts: r.timeouts,
          durationSec,
          throughputPerSec: samples.length / durationSec,
          p50Ms: s.p50Ms,
          p90Ms: s.p90Ms,
          p99Ms: s.p99Ms,
          maxMs: s.maxMs,
          meanMs: s.meanMs,
          samplesMs: samples,
        });
      },
    );
    inst.on('response', (_client, status, _bytes, ms) => {
      if (status >= 200 && status < 300) samples.push(ms);
    });
  });
}
