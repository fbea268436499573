import { readdir, readFile, readlink } from 'node:fs/promises';

// Reads /proc to find the browser's processes: playwright's launch() does not tell the pid, and the
// memory cap has to count the renderer and GPU/utility children too, not only the main process.

interface Proc {
  pid: number;
  ppid: number;
  rssBytes: number;
}

const PAGE = 4096;

// All reads go through the thread pool: /proc on a busy host is hundreds of files, and none of this may
// hold up the event loop that answers API requests.
async function readProcs(): Promise<Proc[]> {
  const names = (await readdir('/proc')).filter((n) => /^\d+$/.test(n));
  const procs = await Promise.all(
    names.map(async (name) => {
      try {
        const stat = await readFile(`/proc/${name}/stat`, 'utf8');
        // The command name may hold spaces and parentheses: fields start after the last ')'.
        const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return { pid: Number(name), ppid: Number(rest[1]), rssBytes: Number(rest[21]) * PAGE };
      } catch {
        return undefined; // the process ended while we looked
      }
    }),
  );
  return procs.filter((p): p is Proc => p !== undefined);
}

/** Pids of direct children of `parent` running `executable` (by /proc/<pid>/exe). */
export async function childrenRunning(parent: number, executable: string): Promise<number[]> {
  const children = (await readProcs()).filter((p) => p.ppid === parent);
  const exes = await Promise.all(children.map((p) => readlink(`/proc/${p.pid}/exe`).catch(() => '')));
  return children.filter((_, i) => exes[i] === executable).map((p) => p.pid);
}

/**
 * Memory of `root` and every process below it, as proportional set size: Chromium's processes share
 * most of their pages (the binary, fonts, shared memory), so adding up their RSS counted the same
 * pages six times over and put an idle browser past a 1 GiB cap. RSS stands in where PSS is unreadable.
 */
export async function treeMemory(root: number): Promise<number> {
  const procs = await readProcs();
  const byParent = new Map<number, Proc[]>();
  for (const p of procs) byParent.set(p.ppid, [...(byParent.get(p.ppid) ?? []), p]);
  const self = procs.find((p) => p.pid === root);
  if (!self) return 0;
  const tree: Proc[] = [];
  const stack = [self];
  while (stack.length > 0) {
    const p = stack.pop()!;
    tree.push(p);
    stack.push(...(byParent.get(p.pid) ?? []));
  }
  // smaps_rollup walks every mapping of a process: ~10 ms for a renderer, so it is read off the event loop.
  const sizes = await Promise.all(tree.map(async (p) => (await pss(p.pid)) ?? p.rssBytes));
  return sizes.reduce((a, b) => a + b, 0);
}

async function pss(pid: number): Promise<number | undefined> {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(await readFile(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}
