import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

// Reads /proc to find the browser's processes: playwright's launch() does not tell the pid, and the
// memory cap has to count the renderer and GPU/utility children too, not only the main process.

interface Proc {
  pid: number;
  ppid: number;
  rssBytes: number;
}

const PAGE = 4096;

function readProcs(): Proc[] {
  const out: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // The command name may hold spaces and parentheses: fields start after the last ')'.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.push({ pid: Number(name), ppid: Number(rest[1]), rssBytes: Number(rest[21]) * PAGE });
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

/** Pids of direct children of `parent` running `executable` (by /proc/<pid>/exe). */
export function childrenRunning(parent: number, executable: string): number[] {
  return readProcs()
    .filter((p) => p.ppid === parent)
    .filter((p) => {
      try {
        return readlinkSync(`/proc/${p.pid}/exe`) === executable;
      } catch {
        return false;
      }
    })
    .map((p) => p.pid);
}

/**
 * Memory of `root` and every process below it, as proportional set size: Chromium's processes share
 * most of their pages (the binary, fonts, shared memory), so adding up their RSS counted the same
 * pages six times over and put an idle browser past a 1 GiB cap. RSS stands in where PSS is unreadable.
 */
export function treeMemory(root: number): number {
  const procs = readProcs();
  const byParent = new Map<number, Proc[]>();
  for (const p of procs) byParent.set(p.ppid, [...(byParent.get(p.ppid) ?? []), p]);
  const self = procs.find((p) => p.pid === root);
  if (!self) return 0;
  let total = 0;
  const stack = [self];
  while (stack.length > 0) {
    const p = stack.pop()!;
    total += pss(p.pid) ?? p.rssBytes;
    stack.push(...(byParent.get(p.pid) ?? []));
  }
  return total;
}

function pss(pid: number): number | undefined {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}
