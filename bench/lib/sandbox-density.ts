// Density for bench/sandboxes: N idle sandboxes at once, each answering an exec; what one costs the
// host (MemAvailable before and after, over N) and the sandboxes' own cgroups, and how much the process
// driving them (the runtime, as in nube) grew.
import { readFile } from 'node:fs/promises';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { round } from './stats.js';

async function memAvailableMb(): Promise<number> {
  const text = await readFile('/proc/meminfo', 'utf8');
  return Number(/^MemAvailable:\s+(\d+)/m.exec(text)?.[1] ?? 0) / 1024;
}

export interface DensityResult {
  count: number;
  answered: number;
  createMs: number;
  hostMbPerSandbox: number;
  cgroupMbPerSandbox: number;
  driverRssGrowthMb: number;
  driverHeapGrowthMb: number;
  execP50Ms: number;
  execSamples: number[];
}

export async function density(rt: NamespacesRuntime, ids: string[]): Promise<DensityResult> {
  global.gc?.();
  const { rss: rss0, heapUsed: heap0 } = process.memoryUsage();
  const avail0 = await memAvailableMb();
  const t0 = performance.now();
  // A few at a time: as a warm pool refills, not as fast as the host can go.
  for (let i = 0; i < ids.length; i += 4) await Promise.all(ids.slice(i, i + 4).map((id) => rt.create({ id })));
  const createMs = performance.now() - t0;
  // Idle: let the page cache and slab settle before reading memory.
  await new Promise((r) => setTimeout(r, 3000));
  const avail1 = await memAvailableMb();
  let cgroupBytes = 0;
  for (const id of ids) cgroupBytes += (await rt.cgroupStats(id)).memoryBytes;
  const answers = await Promise.all(ids.map((id) => rt.exec(id, 'hostname')));
  global.gc?.();
  const { rss: rss1, heapUsed: heap1 } = process.memoryUsage();
  const samples = answers.map((a) => a.durationMs);
  return {
    count: ids.length,
    answered: answers.filter((a, i) => a.stdout.trim() === ids[i]).length,
    createMs: round(createMs),
    hostMbPerSandbox: round((avail0 - avail1) / ids.length),
    cgroupMbPerSandbox: round(cgroupBytes / ids.length / 1024 / 1024),
    driverRssGrowthMb: round((rss1 - rss0) / 1024 / 1024),
    driverHeapGrowthMb: round((heap1 - heap0) / 1024 / 1024),
    execP50Ms: [...samples].sort((a, b) => a - b)[Math.floor(samples.length / 2)] ?? 0,
    execSamples: samples,
  };
}
