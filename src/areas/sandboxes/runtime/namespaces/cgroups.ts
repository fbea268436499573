import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import type { SandboxLimits } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { CGROUP_ROOT, probeCgroups, V1_CONTROLLERS } from './cgroup-probe.js';

const ROOT = CGROUP_ROOT;
// cgroup v1: one hierarchy per controller. (This host mounts v2 at /sys/fs/cgroup/unified with only
// hugetlb, so v1 is where the controllers are; a v2 implementation would use one dir per sandbox.)
const CONTROLLERS = V1_CONTROLLERS;

export function checkCgroups(): void {
  const { usable, found } = probeCgroups(ROOT);
  if (!usable) {
    const seen = found.map((l) => l.detail).join('; ') || `no cgroup v1 controllers under ${ROOT}`;
    throw new SandboxRuntimeError('HostUnsupported', `${seen} (only the v1 layout is implemented)`);
  }
}

function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}

async function readPids(dir: string): Promise<number[]> {
  const text = await readFile(`${dir}/cgroup.procs`, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map(Number);
}

/** The cgroups of one sandbox: `<controller>/<parent>/<id>`. */
export class SandboxCgroup {
  constructor(
    readonly parent: string,
    readonly id: string,
  ) {}

  dir(controller: (typeof CONTROLLERS)[number]): string {
    return `${ROOT}/${controller}/${this.parent}/${this.id}`;
  }

  /** Directories a process joins to be accounted to this sandbox. */
  dirs(): string[] {
    return CONTROLLERS.map((c) => this.dir(c));
  }

  async create(limits: SandboxLimits): Promise<void> {
    await Promise.all(CONTROLLERS.map((c) => mkdir(this.dir(c), { recursive: true })));
    const mem = this.dir('memory');
    const bytes = String(limits.memoryMb * 1024 * 1024);
    await writeFile(`${mem}/memory.limit_in_bytes`, bytes);
    // With swap accounting the limit must cover swap too, or a hog just swaps.
    if (existsSync(`${mem}/memory.memsw.limit_in_bytes`)) {
      await writeFile(`${mem}/memory.memsw.limit_in_bytes`, bytes).catch(() => {});
    }
    const cpu = this.dir('cpu');
    const period = 100_000;
    await writeFile(`${cpu}/cpu.cfs_period_us`, String(period));
    await writeFile(`${cpu}/cpu.cfs_quota_us`, String(Math.max(1000, Math.round(limits.cpus * period))));
    await writeFile(`${this.dir('pids')}/pids.max`, String(limits.pids));
  }

  /** A child cgroup for one exec: the helper creates it and kills what is left in it when the command ends. */
  execDir(name: string): string {
    return `${this.dir('pids')}/${name}`;
  }

  async freeze(): Promise<void> {
    const f = this.dir('freezer');
    await writeFile(`${f}/freezer.state`, 'FROZEN');
    for (let i = 0; i < 500; i++) {
      if ((await readFile(`${f}/freezer.state`, 'utf8')).trim() === 'FROZEN') return;
      await sleep(2);
    }
    throw new SandboxRuntimeError('Internal', `sandbox ${this.id} did not freeze`);
  }

  async thaw(): Promise<void> {
    await writeFile(`${this.dir('freezer')}/freezer.state`, 'THAWED').catch(() => {});
  }

  async pids(): Promise<number[]> {
    return readPids(this.dir('pids'));
  }

  async stats(): Promise<{ memoryBytes: number; oomKills: number; pids: number; pidsMaxHits: number }> {
    const read = (p: string) => readFile(p, 'utf8').catch(() => '');
    const num = async (p: string) => Number((await read(p)).trim().split(' ').pop() || 0);
    const oom = /^oom_kill (\d+)$/m.exec(await read(`${this.dir('memory')}/memory.oom_control`));
    return {
      memoryBytes: await num(`${this.dir('memory')}/memory.usage_in_bytes`),
      oomKills: oom ? Number(oom[1]) : 0,
      pids: await num(`${this.dir('pids')}/pids.current`),
      pidsMaxHits: await num(`${this.dir('pids')}/pids.events`),
    };
  }

  /** Kill everything left (thawing first, a frozen task cannot die) and remove the directories. */
  async destroy(): Promise<void> {
    if (!existsSync(this.dir('pids'))) return;
    await this.thaw();
    for (let round = 0; round < 200; round++) {
      const pids = new Set<number>();
      for (const c of CONTROLLERS) for (const p of await readPids(this.dir(c))) pids.add(p);
      if (pids.size === 0) break;
      for (const p of pids) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      await sleep(5);
    }
    for (const c of CONTROLLERS) await removeTree(this.dir(c));
  }
}

async function removeTree(dir: string): Promise<void> {
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
