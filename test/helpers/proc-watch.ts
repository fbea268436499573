// Watches a nube child process from outside while an attack runs: its resident memory (sampled from
// /proc, so a blocked event loop in the child cannot hide a peak) and how long /healthz takes to answer
// (stalls of the child's event loop show up there).
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

export interface Watched<T> {
  result: T;
  /** Peak RSS during the run minus RSS before it, in MB. */
  rssGrowthMb: number;
  /** Slowest and median /healthz answer during the run, in ms. */
  healthzMaxMs: number;
  healthzP50Ms: number;
  healthzSamples: number;
}

/** Runs `fn` while sampling the child's RSS every 5 ms and timing /healthz back to back (10 ms apart). */
export async function watchChild<T>(pid: number, base: string, fn: () => Promise<T>): Promise<Watched<T>> {
  const before = rssMb(pid);
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssMb(pid));
  }, 5);
  let running = true;
  const latencies: number[] = [];
  const prober = (async () => {
    while (running) {
      const t0 = performance.now();
      await (await fetch(`${base}/healthz`)).arrayBuffer();
      latencies.push(performance.now() - t0);
      await sleep(10);
    }
  })();
  try {
    const result = await fn();
    running = false;
    await prober;
    peak = Math.max(peak, rssMb(pid));
    const sorted = latencies.toSorted((a, b) => a - b);
    return {
      result,
      rssGrowthMb: peak - before,
      healthzMaxMs: sorted.at(-1) ?? 0,
      healthzP50Ms: sorted[Math.floor(sorted.length / 2)] ?? 0,
      healthzSamples: sorted.length,
    };
  } finally {
    running = false;
    clearInterval(sampler);
    await prober.catch(() => {});
  }
}
