// Which nube processes use the host's shared sandbox parts right now: each serving nube writes one
// small file under `/run/nube/users/` (its pid, start time, data dir, bridge and cgroup parent) and
// removes it when it stops. `nube cleanup` reads them to refuse while nube runs on a data dir, and to
// keep a bridge, nft table or cgroup parent that another nube on the same host still uses. A nube
// killed with -9 leaves its file: its pid is dead (or recycled, told by the start time), so it counts
// for nothing and the next reader removes it.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { DEFAULT_RUN_ROOT, processStartTime } from './state.js';

export interface HostUser {
  pid: number;
  startTime: string;
  /** The driver's data dir (`$NUBE_DATA_DIR/sandbox-runtime`). */
  dataDir: string;
  bridge: string;
  cgroupParent: string;
}

export function usersDir(runRoot = DEFAULT_RUN_ROOT): string {
  return `${runRoot}/users`;
}

/** Registers this process; returns what unregisters it. */
export function registerHostUser(
  u: Omit<HostUser, 'pid' | 'startTime'>,
  runRoot = DEFAULT_RUN_ROOT,
): () => void {
  const dir = usersDir(runRoot);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch {
    // Not root (a nube without sandboxes): it holds nothing on the host to keep.
    return () => {};
  }
  // Several nubes may run in one process (tests): one file each.
  const file = `${dir}/${process.pid}-${randomBytes(4).toString('hex')}.json`;
  const startTime = readFileSync(`/proc/${process.pid}/stat`, 'utf8');
  const entry: HostUser = {
    pid: process.pid,
    startTime: startTime.slice(startTime.lastIndexOf(')') + 2).split(' ')[19] ?? '',
    ...u,
    dataDir: resolve(u.dataDir),
  };
  writeFileSync(file, JSON.stringify(entry));
  return () => rmSync(file, { force: true });
}

/** The live users (a dead one's file is removed on the way). */
export async function liveHostUsers(runRoot = DEFAULT_RUN_ROOT): Promise<HostUser[]> {
  const dir = usersDir(runRoot);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const out: HostUser[] = [];
  for (const n of names) {
    let u: HostUser;
    try {
      u = JSON.parse(readFileSync(`${dir}/${n}`, 'utf8')) as HostUser;
    } catch {
      continue;
    }
    if ((await processStartTime(u.pid)) === u.startTime) out.push(u);
    else rmSync(`${dir}/${n}`, { force: true });
  }
  return out;
}
