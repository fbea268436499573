// Which cgroup layout this host offers the sandbox driver. The one place that decides it: the runtime
// refuses to start sandboxes without a usable layout (checkCgroups) and `nube doctor` reports it.
// A layout nube learns to drive (cgroup v2) adds its probe to PROBES.
import { accessSync, constants, existsSync } from 'node:fs';

export const CGROUP_ROOT = '/sys/fs/cgroup';

/** The v1 controllers a sandbox uses: one hierarchy each, mounted at <root>/<controller>. */
export const V1_CONTROLLERS = ['memory', 'cpu', 'pids', 'freezer'] as const;

export interface CgroupLayout {
  version: 'v1' | 'v2';
  /** nube can run sandboxes on it. */
  usable: boolean;
  /** What was found, for messages (`memory, cpu, pids, freezer mounted`). */
  detail: string;
}

type Probe = (root: string) => CgroupLayout | null;

const writable = (path: string): boolean => {
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
};

/** v1: every controller nube uses mounted on its own hierarchy, and writable (to make child cgroups). */
const probeV1: Probe = (root) => {
  const mounted = V1_CONTROLLERS.filter((c) => existsSync(`${root}/${c}/cgroup.procs`));
  if (mounted.length === 0) return null;
  const missing = V1_CONTROLLERS.filter((c) => !mounted.includes(c));
  const readOnly = mounted.filter((c) => !writable(`${root}/${c}`));
  const problems = [
    ...(missing.length ? [`${missing.join(', ')} not mounted at ${root}/<controller>`] : []),
    ...(readOnly.length ? [`${readOnly.join(', ')} not writable by this user`] : []),
  ];
  return {
    version: 'v1',
    usable: problems.length === 0,
    detail: problems.length ? `cgroup v1: ${problems.join('; ')}` : `cgroup v1: ${mounted.join(', ')} mounted and writable`,
  };
};

const PROBES: Probe[] = [probeV1];

/** Every layout found (usable or not) and the first usable one, which the runtime drives. */
export function probeCgroups(root = CGROUP_ROOT): { usable: CgroupLayout | undefined; found: CgroupLayout[] } {
  const found = PROBES.map((p) => p(root)).filter((l): l is CgroupLayout => l !== null);
  return { usable: found.find((l) => l.usable), found };
}
