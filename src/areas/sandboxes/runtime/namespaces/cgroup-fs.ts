// What both cgroup versions do the same way on cgroupfs: read members, kill them, remove a tree.
import { existsSync } from 'node:fs';
import { readdir, readFile, rmdir } from 'node:fs/promises';
import { SandboxRuntimeError } from '../driver.js';

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export async function readPids(dir: string): Promise<number[]> {
  const text = await readFile(`${dir}/cgroup.procs`, 'utf8').catch(() => '');
  return text.split('\n').filter(Boolean).map(Number);
}

/** SIGKILL every process in these cgroups and their children, until none is left (or ~1 s). */
export async function killAll(dirs: string[]): Promise<void> {
  const tree = async (d: string): Promise<string[]> => {
    const subs = await readdir(d, { withFileTypes: true }).catch(() => []);
    const nested = await Promise.all(subs.filter((e) => e.isDirectory()).map((e) => tree(`${d}/${e.name}`)));
    return [d, ...nested.flat()];
  };
  for (let round = 0; round < 200; round++) {
    const pids = new Set<number>();
    for (const d of dirs) for (const sub of await tree(d)) for (const p of await readPids(sub)) pids.add(p);
    if (pids.size === 0) return;
    for (const p of pids) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    await sleep(5);
  }
}

/** rmdir a cgroup and its children, children first (a cgroup with children cannot go). */
export async function removeTree(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  const entries = await readdir(dir, { withFileTypes: true });
  for (const e of entries) if (e.isDirectory()) await removeTree(`${dir}/${e.name}`);
  for (let i = 0; i < 50; i++) {
    try {
      await rmdir(dir);
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      await sleep(10); // EBUSY while the last task is still being reaped
    }
  }
  throw new SandboxRuntimeError('Internal', `cannot remove cgroup ${dir}`);
}
