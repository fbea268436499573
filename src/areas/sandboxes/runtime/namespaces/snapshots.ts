import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import type { SnapshotInfo } from '../driver.js';
import type { SandboxCgroup } from './cgroups.js';
import { run } from './proc.js';
import type { Layout, SandboxRecord } from './state.js';
import { saveSnapshot } from './state.js';

export function newSnapshotId(): string {
  return `snap_${randomBytes(8).toString('hex')}`;
}

/** Apparent size of a tree, as `du -sb` counts it (a hard-linked file once), without a process. */
export async function treeBytes(root: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const walk = async (path: string): Promise<void> => {
    const st = await lstat(path, { bigint: true });
    const key = `${st.dev}:${st.ino}`;
    if (seen.has(key)) return;
    seen.add(key);
    total += Number(st.size);
    if (st.isDirectory()) await Promise.all((await readdir(path)).map((n) => walk(`${path}/${n}`)));
  };
  await walk(root);
  return total;
}

/**
 * A snapshot is a frozen copy of the sandbox's upper dir. The cgroup is frozen while copying so no
 * file is caught half-written; `cp -a` keeps owners, whiteouts and overlay xattrs, and on the store
 * (store.ts: XFS or btrfs) every file is a reflink, so the copy costs metadata, not data. The copy
 * works as a read-only lower layer of new sandboxes.
 */
export async function takeSnapshot(
  layout: Layout,
  rec: SandboxRecord,
  cg: Pick<SandboxCgroup, 'freeze' | 'thaw'> | null,
  id = newSnapshotId(),
): Promise<SnapshotInfo> {
  const p = layout.snapshot(id);
  await mkdir(p.dir, { recursive: true });
  try {
    if (cg) await cg.freeze();
    try {
      await run('cp', ['-a', '--reflink=auto', layout.sandbox(rec.id).upper, p.layer]);
    } finally {
      if (cg) await cg.thaw();
    }
    const info: SnapshotInfo = {
      id,
      sourceSandbox: rec.id,
      template: rec.template,
      templateBuild: rec.templateBuild,
      layers: rec.layers,
      sizeBytes: await treeBytes(p.layer),
      createdAt: new Date().toISOString(),
    };
    await saveSnapshot(layout, info);
    return info;
  } catch (e) {
    await rm(p.dir, { recursive: true, force: true });
    throw e;
  }
}
