import type { PlatformDeps } from '../deps.js';
import type { SandboxesRepo, SandboxRow } from './repo.js';
import { type SandboxRuntime, SandboxRuntimeError } from './runtime/driver.js';

/** What collecting snapshots needs of the sandboxes service. */
export interface SnapshotGcHost {
  readonly repo: SandboxesRepo;
  readonly runtime: SandboxRuntime;
  readonly deps: Pick<PlatformDeps, 'log'>;
  /** Snapshots another area keeps (an owner's templates' layers): never collected here. */
  readonly keptSnapshots?: (() => Promise<Set<string>>) | null;
}

/**
 * Free driver snapshots nothing needs any more: the layers the destroyed sandbox stood on and the
 * snapshots taken of it, except derived templates' (they live until deleted) and snapshots of a
 * sandbox that still exists. A snapshot something else still stands on stays (SnapshotInUse).
 */
export async function collectSnapshots(
  core: SnapshotGcHost,
  row: SandboxRow,
  layers: string[],
): Promise<void> {
  const keep = await core.repo.templateSnapshotIds();
  for (const snap of (await core.keptSnapshots?.()) ?? []) keep.add(snap);
  const own = await core.repo.snapshotsOf(row.id);
  const candidates = new Set([...layers, ...own.map((s) => s.id)]);
  for (const snap of candidates) {
    if (keep.has(snap)) continue;
    const rec = await core.repo.getSnapshot(snap);
    if (rec && rec.sandbox_id !== row.id && rec.kind === 'user' && (await core.repo.get(rec.sandbox_id)))
      continue;
    try {
      await core.runtime.deleteSnapshot(snap);
      await core.repo.deleteSnapshot(snap);
    } catch (e) {
      if (!(e instanceof SandboxRuntimeError && e.code === 'SnapshotInUse')) {
        core.deps.log.warn({ err: e, snapshot: snap }, 'could not delete snapshot');
      }
    }
  }
}
