// The one interface both cgroup hierarchies (v1, v2) are used through; cgroups.ts picks the host's.
import type { SandboxCounters, SandboxLimits } from '../driver.js';

export type CgroupStats = SandboxCounters;

/** The cgroup(s) of one sandbox. */
export interface SandboxCgroup {
  readonly id: string;
  /** Create it with these limits (memory without swap, CPU bandwidth, pids). */
  create(limits: SandboxLimits): Promise<void>;
  /** Directories the sandbox's init and /bg processes join. */
  dirs(): string[];
  /**
   * What one exec joins: `cgroups`, and `execCgroups`, created fresh by the spawner, which kills what
   * is left in them when the command ends (so a `setsid` child does not outlive exec).
   */
  execJoin(name: string): { cgroups: string[]; execCgroups: string[] };
  /** Stop every process in it (snapshots copy a still tree); resolves once the kernel says frozen. */
  freeze(): Promise<void>;
  thaw(): Promise<void>;
  stats(): Promise<CgroupStats>;
  /** Kill everything left in it and remove it. */
  destroy(): Promise<void>;
}

/** The host's hierarchy, with nube's parent cgroup in it. */
export interface CgroupHost {
  readonly version: 1 | 2;
  /** Check the controllers are there and set up the parent (v2: delegate the controllers to it). */
  prepare(): Promise<void>;
  sandbox(id: string): SandboxCgroup;
}
