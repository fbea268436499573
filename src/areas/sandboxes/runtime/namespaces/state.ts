import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { NetworkPolicy, SandboxLimits, SandboxState, SnapshotInfo, VolumeMount } from '../driver.js';

/**
 * What the driver keeps per sandbox in `$DATA/sandboxes/<id>/state.json` so that a new runtime on
 * the same data dir can re-adopt it. The driver owns this file; the caller persists nothing for it.
 */
export interface SandboxRecord {
  id: string;
  state: SandboxState;
  template: string;
  templateBuild: string;
  layers: string[];
  /** Overlay lower dirs, top first: snapshot layers, then the template rootfs. */
  lowerDirs: string[];
  leaseIdx: number;
  env: Record<string, string>;
  limits: SandboxLimits;
  policy: NetworkPolicy;
  /** Volumes bound in at each start (absent in records made before volumes). */
  mounts?: VolumeMount[];
  createdAt: string;
  init: { pid: number; innerPid: number; startTime: string } | null;
  /** Suspended with its processes frozen in place (init, network and mount kept). */
  frozen?: boolean;
}

/** Where the run dirs of every data dir live (`/run`: a tmpfs every host has, root-owned, traversable). */
export const DEFAULT_RUN_ROOT = '/run/nube';

/**
 * Paths of one runtime. Files that must last (state, upper dirs, logs, snapshots) live in the data
 * dir, which may sit under a directory only root can enter (`/root/nube/data`). What the sandbox's
 * user namespace must reach *by path* (bwrap's bind source, runsc's bundle and the binaries it
 * mounts) lives in `runDir` instead: `<runRoot>/<hash of the data dir>/<id>`, the last component
 * owned by the sandbox's uid and 0700, so no other host user can enter it.
 */
export class Layout {
  readonly runDir: string;
  /** Holds `sandboxes/` and `snapshots/`: the data dir, or its reflink store (store.ts), set at start. */
  private storeDir: string;
  constructor(
    readonly dataDir: string,
    readonly runRoot: string = DEFAULT_RUN_ROOT,
  ) {
    const key = createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 16);
    this.runDir = `${runRoot}/${key}`;
    this.storeDir = dataDir;
  }
  useStore(root: string): void {
    this.storeDir = root;
  }
  get sandboxesDir(): string {
    return `${this.storeDir}/sandboxes`;
  }
  get snapshotsDir(): string {
    return `${this.storeDir}/snapshots`;
  }
  sandbox(id: string) {
    const dir = `${this.sandboxesDir}/${id}`;
    const run = `${this.runDir}/${id}`;
    // Sandboxes with a disk limit (store-quota.ts) keep upper and work in `disk/`; older ones beside it.
    const inDisk = () => existsSync(`${dir}/disk`);
    return {
      dir,
      state: `${dir}/state.json`,
      disk: `${dir}/disk`,
      get upper() {
        return inDisk() ? `${dir}/disk/upper` : `${dir}/upper`;
      },
      get work() {
        return inDisk() ? `${dir}/disk/work` : `${dir}/work`;
      },
      run,
      merged: `${run}/merged`,
      /** Where the overlay was mounted before the run dir existed (a sandbox still running since). */
      legacyMerged: `${dir}/merged`,
      bg: `${dir}/bg`,
      initLog: `${dir}/init.log`,
    };
  }
  snapshot(id: string) {
    const dir = `${this.snapshotsDir}/${id}`;
    return { dir, layer: `${dir}/layer`, meta: `${dir}/meta.json` };
  }
}

/** Synchronous: a small file and a rename, where two thread-pool round trips cost ~1 ms each under load. */
async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, JSON.stringify(value, null, 2));
  renameSync(tmp, path);
}

export async function saveRecord(layout: Layout, rec: SandboxRecord): Promise<void> {
  await writeJsonAtomic(layout.sandbox(rec.id).state, rec);
}

/**
 * Read synchronously: it is on every exec's path, and a small file in the page cache is read in tens of
 * microseconds, where fs/promises takes four thread-pool round trips (open, stat, read, close).
 */
export async function loadRecord(layout: Layout, id: string): Promise<SandboxRecord | null> {
  let text: string;
  try {
    text = readFileSync(layout.sandbox(id).state, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw e;
  }
  return JSON.parse(text) as SandboxRecord;
}

export async function loadAllRecords(layout: Layout): Promise<SandboxRecord[]> {
  const dir = layout.sandboxesDir;
  if (!existsSync(dir)) return [];
  const out: SandboxRecord[] = [];
  for (const id of await readdir(dir)) {
    const rec = await loadRecord(layout, id);
    if (rec) out.push(rec);
  }
  return out;
}

export async function saveSnapshot(layout: Layout, info: SnapshotInfo): Promise<void> {
  await writeJsonAtomic(layout.snapshot(info.id).meta, info);
}

export async function loadSnapshot(layout: Layout, id: string): Promise<SnapshotInfo | null> {
  const p = layout.snapshot(id).meta;
  if (!existsSync(p)) return null;
  return JSON.parse(await readFile(p, 'utf8')) as SnapshotInfo;
}

export async function loadAllSnapshots(layout: Layout): Promise<SnapshotInfo[]> {
  const dir = layout.snapshotsDir;
  if (!existsSync(dir)) return [];
  const out: SnapshotInfo[] = [];
  for (const id of await readdir(dir)) {
    const s = await loadSnapshot(layout, id);
    if (s) out.push(s);
  }
  return out;
}

/** Field 22 of /proc/<pid>/stat: tells a recycled pid from the process we started. */
export async function processStartTime(pid: number): Promise<string | null> {
  try {
    // Sync: a read of procfs never waits on a disk, and four thread-pool round trips cost more.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}
