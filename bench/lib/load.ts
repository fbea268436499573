import { createRequire } from 'node:module';
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
 * Closed-loop load with autocannon: `connections` keep-alive connections, each sending its next request
 * when the previous answer arrives, for `durationSec`. Latencies are taken from every 2xx response at
 * full (sub-millisecond) resolution rather than from autocannon's 1 ms histogram.
 */
export function runLoad(opts: LoadOptions): Promise<LoadResult> {
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
