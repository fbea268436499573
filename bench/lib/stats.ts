import { performance } from 'node:perf_hooks';

/** The p-th percentile (0..100) of `values` by nearest rank; NaN for an empty list. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return percentileSorted(sorted, p);
}

/** Like percentile, for values already sorted ascending. */
export function percentileSorted(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((Math.min(100, Math.max(0, p)) / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export interface Summary {
  count: number;
  minMs: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Count, min, mean, p50, p90, p99 and max of a list of millisecond samples. */
export function summarize(samplesMs: readonly number[]): Summary {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const sum = sorted.reduce((a, b) => a + b, 0);
  return {
    count: sorted.length,
    minMs: sorted[0] ?? Number.NaN,
    meanMs: sorted.length ? sum / sorted.length : Number.NaN,
    p50Ms: percentileSorted(sorted, 50),
    p90Ms: percentileSorted(sorted, 90),
    p99Ms: percentileSorted(sorted, 99),
    maxMs: sorted[sorted.length - 1] ?? Number.NaN,
  };
}

export interface TimeItOptions {
  /** Measured iterations (upper bound). */
  iterations: number;
  /** Unmeasured iterations first (JIT, caches, connections). Default 0. */
  warmup?: number;
  /** Stop measuring after this many milliseconds even if iterations remain. Default 60 000. */
  maxMs?: number;
}

export interface TimeItResult extends Summary {
  samplesMs: number[];
  /** Measured iterations per second of wall time (sequential). */
  throughputPerSec: number;
  totalMs: number;
}

/** Runs `fn` sequentially `warmup` + `iterations` times, bounded by `maxMs`, and summarizes the timings. */
export async function timeIt(fn: (i: number) => unknown, opts: TimeItOptions): Promise<TimeItResult> {
  const warmup = opts.warmup ?? 0;
  const maxMs = opts.maxMs ?? 60_000;
  const deadline = performance.now() + maxMs;
  for (let i = 0; i < warmup && performance.now() < deadline; i++) await fn(i);
  const samplesMs: number[] = [];
  const start = performance.now();
  for (let i = 0; i < opts.iterations; i++) {
    const t0 = performance.now();
    await fn(i);
    samplesMs.push(performance.now() - t0);
    if (performance.now() > deadline) break;
  }
  const totalMs = performance.now() - start;
  return { ...summarize(samplesMs), samplesMs, totalMs, throughputPerSec: (samplesMs.length / totalMs) * 1000 };
}

/** Rounds for display/JSON: 3 significant decimals below 10, 1 decimal below 1000, integers above. */
export function round(n: number): number {
  if (!Number.isFinite(n)) return n;
  const a = Math.abs(n);
  if (a < 10) return Math.round(n * 1000) / 1000;
  if (a < 1000) return Math.round(n * 10) / 10;
  return Math.round(n);
}
