// Which cgroup hierarchy holds the controllers sandboxes need (cgroup v1, a hierarchy per controller:
// this project's machines; or v2, one unified tree: Debian 12's default), detected at the runtime's
// first use. Both are used through the interface in cgroup-host.ts.
import { existsSync, readFileSync } from 'node:fs';
import { SandboxRuntimeError } from '../driver.js';
import type { CgroupHost } from './cgroup-host.js';
import { CgroupV1Host, V1_CONTROLLERS } from './cgroups-v1.js';
import { CgroupV2Host, V2_CONTROLLERS } from './cgroups-v2.js';

export type { CgroupHost, CgroupStats, SandboxCgroup } from './cgroup-host.js';

interface Mount {
  path: string;
  type: string;
  options: string[];
}

/** cgroup mounts from /proc/self/mountinfo: `... mountpoint ... - fstype source superoptions`. */
export function cgroupMounts(mountinfo: string): Mount[] {
  const out: Mount[] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const [type, , opts] = right.split(' ');
    if (type !== 'cgroup' && type !== 'cgroup2') continue;
    out.push({ path: left.split(' ')[4]!.replace(/\\040/g, ' '), type, options: (opts ?? '').split(',') });
  }
  return out;
}

/**
 * The hierarchy to use: v2 when its root offers memory, cpu and pids (its freezer is built in), else
 * v1 when memory, cpu, pids and freezer are each mounted, else HostUnsupported naming what each lacks.
 * `want` restricts the choice to one of them (NUBE_SANDBOX_CGROUPS).
 */
export function detectCgroups(
  parent: string,
  want: 'auto' | 'v1' | 'v2' = 'auto',
  mountinfo = readFileSync('/proc/self/mountinfo', 'utf8'),
): CgroupHost {
  const mounts = cgroupMounts(mountinfo);
  const v2 = mounts.find((m) => m.type === 'cgroup2');
  const offered = v2 && existsSync(`${v2.path}/cgroup.controllers`)
    ? readFileSync(`${v2.path}/cgroup.controllers`, 'utf8').trim().split(/\s+/).filter(Boolean)
    : [];
  const v2Missing = V2_CONTROLLERS.filter((c) => !offered.includes(c));
  if (v2 && v2Missing.length === 0 && want !== 'v1') return new CgroupV2Host(v2.path, parent);
  const v1 = new Map<string, string>();
  for (const m of mounts) {
    if (m.type !== 'cgroup') continue;
    for (const c of V1_CONTROLLERS) if (m.options.includes(c) && !v1.has(c)) v1.set(c, m.path);
  }
  const v1Missing = V1_CONTROLLERS.filter((c) => !v1.has(c));
  // cpuacct is optional: with it a sandbox's CPU time includes commands that have ended (key caps).
  const cpuacct = mounts.find((m) => m.type === 'cgroup' && m.options.includes('cpuacct'))?.path;
  if (v1Missing.length === 0 && want !== 'v2') return new CgroupV1Host(Object.fromEntries(v1) as Record<(typeof V1_CONTROLLERS)[number], string>, parent, cpuacct);
  const v2Says = want === 'v1' ? null : v2
    ? `cgroup v2 at ${v2.path} offers ${offered.join(', ') || 'no controllers'} (missing ${v2Missing.join(', ')})`
    : 'no cgroup v2 hierarchy is mounted';
  const v1Says = want === 'v2' ? null : v1.size
    ? `cgroup v1 has ${[...v1.keys()].join(', ')} (missing ${v1Missing.join(', ')})`
    : 'no cgroup v1 controller is mounted';
  const where = want === 'auto' ? 'either all in the unified (v2) hierarchy or each mounted as cgroup v1' : `in cgroup ${want} (NUBE_SANDBOX_CGROUPS=${want})`;
  throw new SandboxRuntimeError(
    'HostUnsupported',
    `sandboxes need the memory, cpu and pids cgroup controllers and a freezer, ${where}: ` +
      `${[v2Says, v1Says].filter(Boolean).join('; ')}. A controller that another hierarchy holds (or that the ` +
      'kernel was booted without) is not available; on a systemd host the unified hierarchy offers them all by default.',
  );
}
