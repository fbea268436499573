// cgroup v2: one unified tree (Debian 12's default, /sys/fs/cgroup). nube's parent sits under the
// root, like Docker's cgroupfs driver does; each sandbox is one cgroup under it:
//
//   <root>                  cgroup.subtree_control += memory cpu pids (the root may hold processes)
//   <root>/<parent>         cgroup.subtree_control += memory cpu pids; never holds a process
//   <root>/<parent>/<id>    memory.max, memory.swap.max, cpu.max, pids.max, cgroup.freeze;
//                           subtree_control left empty: its init and /bg processes live in it
//   <root>/<parent>/<id>/x… one per exec (swept when the command ends); limits of <id> apply to it
//
// The kernel's rule ("no internal processes"): a cgroup that enables controllers for its children
// may hold no process itself (the root is exempt). So processes only ever go into <id> (which enables
// nothing) or its exec children, never into <parent>.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { SandboxLimits } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import type { CgroupHost, CgroupStats, SandboxCgroup } from './cgroup-host.js';
import { killAll, removeTree, sleep } from './cgroup-fs.js';

/** The controllers a sandbox's limits need; the freezer is part of every v2 cgroup (kernel 5.2+). */
export const V2_CONTROLLERS = ['memory', 'cpu', 'pids'] as const;

async function words(path: string): Promise<string[]> {
  return (await readFile(path, 'utf8')).trim().split(/\s+/).filter(Boolean);
}

function unsupported(message: string): SandboxRuntimeError {
  return new SandboxRuntimeError('HostUnsupported', `cgroup v2: ${message}`);
}

export class CgroupV2Host implements CgroupHost {
  readonly version = 2;

  /**
   * `root`: where the unified hierarchy is mounted. `controllers`: what to delegate and set limits
   * with; the default is what sandboxes need (tests on a host whose controllers are bound to v1 pass
   * what its v2 tree has, to exercise the real kernel's rules without the limits).
   */
  constructor(
    readonly root: string,
    readonly parent: string,
    readonly controllers: readonly string[] = V2_CONTROLLERS,
  ) {}

  get parentDir(): string {
    return `${this.root}/${this.parent}`;
  }

  /** Delegate the controllers from the root down to the parent, creating the parent. */
  async prepare(): Promise<void> {
    await this.enable(this.root);
    let dir = this.root;
    for (const part of this.parent.split('/')) {
      dir = `${dir}/${part}`;
      await mkdir(dir).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'EEXIST') throw unsupported(`cannot create ${dir}: ${e.message}`);
      });
      await this.enable(dir);
    }
    // cgroup.freeze exists in every non-root cgroup since Linux 5.2.
    if (!existsSync(`${this.parentDir}/cgroup.freeze`)) {
      throw unsupported(`${this.parentDir} has no cgroup.freeze (the v2 freezer needs Linux 5.2 or newer)`);
    }
  }

  /** Make `dir` hand the controllers to its children (a write only for what is missing). */
  private async enable(dir: string): Promise<void> {
    const enabled = await words(`${dir}/cgroup.subtree_control`);
    const missing = this.controllers.filter((c) => !enabled.includes(c));
    if (missing.length === 0) return;
    const offered = await words(`${dir}/cgroup.controllers`);
    const absent = missing.filter((c) => !offered.includes(c));
    if (absent.length) {
      throw unsupported(`${dir} is not given the ${absent.join(', ')} controller(s) by its parent`);
    }
    try {
      await writeFile(`${dir}/cgroup.subtree_control`, missing.map((c) => `+${c}`).join(' '));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EBUSY') {
        throw unsupported(
          `cannot enable ${missing.join(', ')} for the children of ${dir}: it holds processes, and a cgroup ` +
            'that hands controllers to its children may not (move them, or set NUBE_SANDBOX_CGROUP to a new name)',
        );
      }
      throw unsupported(`cannot enable ${missing.join(', ')} in ${dir}: ${(e as Error).message}`);
    }
  }

  sandbox(id: string): SandboxCgroupV2 {
    return new SandboxCgroupV2(this, id);
  }
}

export class SandboxCgroupV2 implements SandboxCgroup {
  readonly dir: string;

  constructor(
    private readonly host: CgroupV2Host,
    readonly id: string,
  ) {
    this.dir = `${host.parentDir}/${id}`;
  }

  dirs(): string[] {
    return [this.dir];
  }

  /** Only the exec's own cgroup: it is inside the sandbox's, so the sandbox's limits and freezer apply. */
  execJoin(name: string) {
    return { cgroups: [], execCgroups: [`${this.dir}/${name}`] };
  }

  /** Synchronous, as v1's (microseconds of cgroupfs writes, not thread-pool round trips). */
  async create(limits: SandboxLimits): Promise<void> {
    mkdirSync(this.dir, { recursive: true });
    const has = (c: string) => this.host.controllers.includes(c);
    if (has('memory')) {
      writeFileSync(`${this.dir}/memory.max`, String(limits.memoryMb * 1024 * 1024));
      // As v1's memsw limit: no swap beyond the limit, or a hog just swaps. Absent without swap accounting.
      if (existsSync(`${this.dir}/memory.swap.max`)) writeFileSync(`${this.dir}/memory.swap.max`, '0');
    }
    if (has('cpu')) {
      const period = 100_000;
      writeFileSync(`${this.dir}/cpu.max`, `${Math.max(1000, Math.round(limits.cpus * period))} ${period}`);
    }
    if (has('pids')) writeFileSync(`${this.dir}/pids.max`, String(limits.pids));
  }


  async freeze(): Promise<void> {
    await writeFile(`${this.dir}/cgroup.freeze`, '1');
    // Freezing is asynchronous: done when cgroup.events says `frozen 1`.
    for (let i = 0; i < 500; i++) {
      if (/^frozen 1$/m.test(await readFile(`${this.dir}/cgroup.events`, 'utf8'))) return;
      await sleep(2);
    }
    await this.thaw();
    throw new SandboxRuntimeError('Internal', `sandbox ${this.id} did not freeze`);
  }

  async thaw(): Promise<void> {
    await writeFile(`${this.dir}/cgroup.freeze`, '0').catch(() => {});
  }

  async stats(): Promise<CgroupStats> {
    const read = (f: string) => readFile(`${this.dir}/${f}`, 'utf8').catch(() => '');
    const field = (text: string, name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    return {
      memoryBytes: Number((await read('memory.current')).trim() || 0),
      cacheBytes: field(await read('memory.stat'), 'file'),
      cpuUsec: field(await read('cpu.stat'), 'usage_usec'),
      oomKills: field(await read('memory.events'), 'oom_kill'),
      pids: Number((await read('pids.current')).trim() || 0),
      pidsMaxHits: field(await read('pids.events'), 'max'),
    };
  }

  /** cgroup.kill (Linux 5.14+) kills the whole subtree at once; older kernels: kill by pid. */
  async destroy(): Promise<void> {
    if (!existsSync(this.dir)) return;
    await this.thaw();
    if (existsSync(`${this.dir}/cgroup.kill`)) await writeFile(`${this.dir}/cgroup.kill`, '1').catch(() => {});
    await killAll([this.dir]);
    await removeTree(this.dir);
  }
}
