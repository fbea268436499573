// Shared set-up for the driver's tests: one templates dir for the whole run (so `base` is built once
// and reused by every test file and later runs), one data dir per test file, a test bridge.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import type { TemplateInfo } from '../driver.js';
import { ProgressWriter } from './build-progress.js';
import { GvisorRuntime } from '../gvisor/runtime.js';
import { NamespacesRuntime, type NamespacesRuntimeOptions } from './runtime.js';
import { recipeHash, templatePaths } from './templates.js';

export const TEST_ROOT = process.env.NUBE_TEST_DATA ?? '/var/lib/nube-test';
export const TEST_BRIDGE = { name: 'nubet0', cidr: '10.78.0.1/16' };

/** The drivers every runtime and API sandbox test runs on (NUBE_TEST_DRIVERS=namespaces to narrow). */
export type Driver = 'namespaces' | 'gvisor';
export const DRIVERS = (process.env.NUBE_TEST_DRIVERS ?? 'namespaces,gvisor').split(',') as Driver[];

export function testRuntime(name: string, extra: Partial<NamespacesRuntimeOptions> = {}, driver: Driver = 'namespaces') {
  const dataDir = `${TEST_ROOT}/${name}-${driver}-${process.pid}`;
  const opts: NamespacesRuntimeOptions = {
    dataDir,
    templatesDir: `${TEST_ROOT}/templates`,
    bridge: TEST_BRIDGE,
    cgroupParent: 'nube-test',
    defaultLimits: { memoryMb: 512, cpus: 1, pids: 256 },
    ...extra,
  };
  return { runtime: newRuntime(driver, opts), opts, dataDir };
}

/** A runtime object of the given driver (a second one on the same data dir plays a restarted nube). */
export function newRuntime(driver: Driver, opts: NamespacesRuntimeOptions): NamespacesRuntime {
  return driver === 'gvisor' ? new GvisorRuntime(opts) : new NamespacesRuntime(opts);
}

/** Destroy every sandbox and snapshot of a runtime and its data dir (netns, veth, cgroups, mounts). */
export async function cleanup(runtime: NamespacesRuntime, dataDir: string): Promise<void> {
  for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
  await runtime.detachStore();
  await rm(dataDir, { recursive: true, force: true });
  await rm(runtime.runDir, { recursive: true, force: true });
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${process.pid.toString(36)}-${Math.random().toString(36).slice(2, 7)}`;
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/**
 * A build of `name` under way in "another process", as a builder leaves it on disk: its lock (held by
 * this live process) and progress file, at the step `line` announces. `finish(meta)` plays its end:
 * the build's meta appears, the lock goes.
 */
export async function buildInProgress(templatesDir: string, name: string, line: string) {
  const build = recipeHash(name, 100_000);
  const p = templatePaths(templatesDir, name, build);
  await mkdir(p.lock, { recursive: true });
  await writeFile(`${p.lock}/pid`, String(process.pid));
  const progress = new ProgressWriter(`${p.lock}/progress.json`, name);
  progress.line(line);
  await progress.flushed();
  return {
    build,
    paths: p,
    async finish(meta: TemplateInfo) {
      await mkdir(p.dir, { recursive: true });
      await writeFile(p.meta, JSON.stringify(meta));
      await rm(p.lock, { recursive: true, force: true });
    },
  };
}
