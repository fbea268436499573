// Whether the process holding a job's lease is certainly gone. A worker's id carries a tag naming its
// process as this host's kernel knows it (boot id, pid namespace, pid, start time): a worker on the same
// host and pid namespace whose pid is gone, a zombie, or a newer process under the same number is dead,
// so its leases need not be waited out (after a kill -9 and a restart, the job resumes at once). A tag
// from elsewhere (another host, container or boot) says nothing: its lease runs out as before.
import { readFileSync, readlinkSync } from 'node:fs';

interface Tag {
  boot: string;
  pidns: string;
  pid: number;
  start: string;
}

const SEP = '#';

function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** Start time (clock ticks since boot) and state of a process, from /proc/<pid>/stat; null when it is gone. */
function procStat(pid: number | 'self'): { start: string; state: string } | null {
  const text = read(`/proc/${pid}/stat`);
  if (text === null) return null;
  // The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // f[0] is field 3 (state); field 22 (starttime) is f[19].
  return f[19] ? { start: f[19], state: f[0] ?? '' } : null;
}

function here(): { boot: string; pidns: string } | null {
  const boot = read('/proc/sys/kernel/random/boot_id')?.trim().replace(/-/g, '');
  let pidns: string;
  try {
    pidns = /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '';
  } catch {
    return null;
  }
  return boot && pidns ? { boot, pidns } : null;
}

/** This process's tag (`boot.pidns.pid.start`), or null where /proc cannot say (then no lease is judged). */
export function processTag(): string | null {
  const h = here();
  const self = procStat('self');
  return h && self ? [h.boot, h.pidns, process.pid, self.start].join('.') : null;
}

/** A worker id with this process's tag appended (`<id>#<tag>`); the id alone where there is no tag. */
export function taggedWorkerId(id: string): string {
  const tag = processTag();
  return tag ? `${id}${SEP}${tag}` : id;
}

function parse(workerId: string): Tag | null {
  const i = workerId.lastIndexOf(SEP);
  if (i < 0) return null;
  const [boot, pidns, pid, start] = workerId.slice(i + 1).split('.');
  const n = Number(pid);
  return boot && pidns && start && Number.isInteger(n) && n > 0 ? { boot, pidns, pid: n, start } : null;
}

/** True only when the worker ran on this host, in this pid namespace and boot, and its process is gone. */
export function workerGoneHere(workerId: string, h = here()): boolean {
  const t = parse(workerId);
  if (!t || !h || t.boot !== h.boot || t.pidns !== h.pidns) return false;
  const now = procStat(t.pid);
  return now === null || now.state === 'Z' || now.start !== t.start;
}

/** workerGoneHere for many ids with one look at this host's identity. */
export function goneHere(workerIds: string[]): Set<string> {
  const h = here();
  return new Set(workerIds.filter((w) => workerGoneHere(w, h)));
}
