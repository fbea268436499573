import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import type { SnapshotInfo } from '../driver.js';
import type { SandboxCgroup } from './cgroups.js';
import { run } from './proc.js';
import type { Layout, SandboxRecord } from './state.js';
import { saveSnapshot } from './state.js';

/**
 * A snapshot is a frozen copy of the sandbox's upper dir. The cgroup is frozen while copying so no
 * file is caught half-written; `cp -a` keeps owners, whiteouts and overlay xattrs (and reflinks where
 * the filesystem can), so the copy works as a read-only lower layer of new sandboxes.
 */
export async function takeSnapshot(
  layout: Layout,
  rec: SandboxRecord,
  cg: Pick<SandboxCgroup, 'freeze' | 'thaw'> | null,
): Promise<SnapshotInfo> {
  const id = `snap_${randomBytes(8).toString('hex')}`;
  const p = layout.snapshot(id);
  await mkdir(p.dir, { recursive: true });
  try {
    if (cg) await cg.freeze();
    try {
      await run('cp', ['-a', '--reflink=auto', layout.sandbox(rec.id).upper, p.layer]);
    } finally {
      if (cg) await cg.thaw();
    }
    const du = await run('du', ['-sb', p.layer]);
    const info: SnapshotInfo = {
      id,
      sourceSandbox: rec.id,
      template: rec.template,
      templateBuild: rec.templateBuild,
      layers: rec.layers,
      sizeBytes: Number(du.stdout.split('\t')[0]),
      createdAt: new Date().toISOString(),
    };
    await saveSnapshot(layout, info);
    return info;
  } catch (e) {
    await rm(p.dir, { recursive: true, force: true });
    throw e;
  }
}
