// cgroup v1: one hierarchy per controller (this project's machines: memory, cpu, pids and freezer
// each mounted under /sys/fs/cgroup/<controller>, v2 at /sys/fs/cgroup/unified with only hugetlb).
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import type { SandboxLimits } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import type { CgroupHost, CgroupStats, SandboxCgroup } from './cgroup-host.js';
import { killAll, removeTree, sleep } from './cgroup-fs.js';

/** cpuacct cgroups known to exist (an exec asks each time: one stat, then none). */
const ACCT_SEEN = new Set<string>();

export const V1_CONTROLLERS = ['memory', 'cpu', 'pids', 'freezer'] as const;
type Controller = (typeof V1_CONTROLLERS)[number];

/** Clock ticks a second in /proc/<pid>/stat (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/** The processes of a cgroup and of the cgroups below it (each exec has one of its own). */
async function treeProcs(dir: string): Promise<string> {
  const here = await readFile(`${dir}/cgroup.procs`, 'utf8').catch(() => '');
  const subs = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const below = await Promise.all(subs.filter((d) => d.isDirectory()).map((d) => treeProcs(`${dir}/${d.name}`)));
  return [here, ...below].join('\n');
}

/** CPU time of these processes and of the children they reaped (utime, stime, cutime, cstime). */
async function processCpuUsec(procs: string): Promise<number> {
  let ticks = 0;
  for (const pid of procs.split('\n').filter(Boolean)) {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks += [11, 12, 13, 14].reduce((a, i) => a + (Number(f[i]) || 0), 0);
  }
  return (ticks * 1_000_000) / USER_HZ;
}

export class CgroupV1Host implements CgroupHost {
  readonly version = 1;
  /** `mounts`: where each controller's hierarchy is mounted. */
  constructor(
    readonly mounts: Record<Controller, string>,
    readonly parent: string,
    /** Where cpuacct is mounted, if it is (alone, or beside cpu): it counts CPU time of ended processes too. */
    readonly cpuacct?: string,
  ) {}

  async prepare(): Promise<void> {}

  sandbox(id: string): SandboxCgroupV1 {
    return new SandboxCgroupV1(this, id);
  }
}

/** The cgroups of one sandbox: `<controller mount>/<parent>/<id>` in each hierarchy. */
export class SandboxCgroupV1 implements SandboxCgroup {
  constructor(
    private readonly host: CgroupV1Host,
    readonly id: string,
  ) {}

  dir(controller: Controller): string {
    return `${this.host.mounts[controller]}/${this.host.parent}/${this.id}`;
  }

  /** The sandbox's cpuacct cgroup when cpuacct is mounted apart from the controllers above; else null. */
  private acctPath(): string | null {
    const m = this.host.cpuacct;
    return m && !Object.values(this.host.mounts).includes(m) ? `${m}/${this.host.parent}/${this.id}` : null;
  }

  /**
   * That cgroup when the sandbox has it. A sandbox an older nube started (before sandboxes joined
   * cpuacct) has none, and survives an upgrade running: its execs and kills go on without it (its CPU
   * time is then read from its live processes, as before).
   */
  acctDir(): string | null {
    const d = this.acctPath();
    if (!d) return null;
    if (ACCT_SEEN.has(d)) return d;
    if (!existsSync(d)) return null;
    ACCT_SEEN.add(d);
    return d;
  }

  dirs(): string[] {
    const acct = this.acctDir();
    return [...V1_CONTROLLERS.map((c) => this.dir(c)), ...(acct ? [acct] : [])];
  }

  /** The exec's own cgroup is in the pids hierarchy only: it is there to be swept. */
  execJoin(name: string) {
    const acct = this.acctDir();
    return { cgroups: [...(['memory', 'cpu', 'freezer'] as const).map((c) => this.dir(c)), ...(acct ? [acct] : [])], execCgroups: [`${this.dir('pids')}/${name}`] };
  }

  /** CPU time of the sandbox, ended processes included, from cpuacct (nanoseconds there); null without it. */
  private async acctUsec(): Promise<number | null> {
    const m = this.host.cpuacct;
    if (!m) return null;
    const dir = this.acctDir() ?? `${m}/${this.host.parent}/${this.id}`;
    const ns = await readFile(`${dir}/cpuacct.usage`, 'utf8').catch(() => null);
    return ns === null || ns.trim() === '' ? null : Math.floor(Number(ns.trim()) / 1000);
  }

  /**
   * Synchronous on purpose (so is v2's): a handful of tiny writes on cgroupfs take microseconds each,
   * while a thread-pool round trip apiece took ~1 ms under load on a sandbox's start path.
   */
  async create(limits: SandboxLimits): Promise<void> {
    const acct = this.acctPath();
    for (const d of [...V1_CONTROLLERS.map((c) => this.dir(c)), ...(acct ? [acct] : [])]) mkdirSync(d, { recursive: true });
    const mem = this.dir('memory');
    const bytes = String(limits.memoryMb * 1024 * 1024);
    // With swap accounting the limit must cover swap too, or a hog just swaps. The memory limit may
    // never exceed memsw's: raising both (a pooled sandbox given a bigger tier) writes memsw first,
    // lowering writes it after (its first write then fails, harmlessly).
    const memsw = existsSync(`${mem}/memory.memsw.limit_in_bytes`) ? `${mem}/memory.memsw.limit_in_bytes` : null;
    const tryWrite = (path: string, text: string) => {
      try {
        writeFileSync(path, text);
      } catch {
        /* see above */
      }
    };
    if (memsw) tryWrite(memsw, bytes);
    writeFileSync(`${mem}/memory.limit_in_bytes`, bytes);
    if (memsw) tryWrite(memsw, bytes);
    const cpu = this.dir('cpu');
    const period = 100_000;
    writeFileSync(`${cpu}/cpu.cfs_period_us`, String(period));
    writeFileSync(`${cpu}/cpu.cfs_quota_us`, String(Math.max(1000, Math.round(limits.cpus * period))));
    writeFileSync(`${this.dir('pids')}/pids.max`, String(limits.pids));
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

  async stats(): Promise<CgroupStats> {
    const read = (p: string) => readFile(p, 'utf8').catch(() => '');
    const num = async (p: string) => Number((await read(p)).trim().split(' ').pop() || 0);
    // `failcnt` stays 0 on this kernel; oom_control counts the kills.
    const oom = /^oom_kill (\d+)$/m.exec(await read(`${this.dir('memory')}/memory.oom_control`));
    const cache = /^cache (\d+)$/m.exec(await read(`${this.dir('memory')}/memory.stat`));
    return {
      memoryBytes: await num(`${this.dir('memory')}/memory.usage_in_bytes`),
      cacheBytes: cache ? Number(cache[1]) : 0,
      cpuUsec: (await this.acctUsec()) ?? (await processCpuUsec(await treeProcs(this.dir('pids')))),
      oomKills: oom ? Number(oom[1]) : 0,
      pids: await num(`${this.dir('pids')}/pids.current`),
      pidsMaxHits: await num(`${this.dir('pids')}/pids.events`),
    };
  }

  /** Kill everything left (thawing first, a frozen task cannot die) and remove the directories. */
  async destroy(): Promise<void> {
    if (!existsSync(this.dir('pids'))) return;
    await this.thaw();
    await killAll(this.dirs());
    for (const d of this.dirs()) await removeTree(d);
    const acct = this.acctPath();
    if (acct) ACCT_SEEN.delete(acct);
  }
}
