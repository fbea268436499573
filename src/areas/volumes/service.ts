// Volumes (issue 33): quota-limited directories on a node's sandbox store that outlive sandboxes,
// mounted into them (the sandboxes area asks this service through its VolumeBinder), snapshotted and
// copied copy-on-write, backed up to the blob store (backups.ts). The bytes are the sandboxes driver's
// (VolumeStore); the rows are this area's. A volume whose node is down is `lost`: every use of it is
// refused with 409 VolumeLost naming its last backup, which restores onto any node.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { NodeRegistry } from '../../platform/nodes.js';
import { PLANS } from '../../platform/plans.js';
import type { SandboxVolume, VolumeBinder } from '../sandboxes/volume-binder.js';
import type { VolumeMount, VolumeStore } from '../sandboxes/runtime/driver.js';
import { rt } from '../sandboxes/views.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { VolumeBackups } from './backups.js';
import type { SnapshotRow, VolumeRow, VolumesRepo } from './repo.js';

const GB = 1024 ** 3;

export interface CreateVolumeInput {
  name: string;
  sizeGB?: number;
  fromVolumeId?: string;
  fromSnapshotId?: string;
  fromBackupId?: string;
}

const iso = (ms: number) => new Date(ms).toISOString();

export class VolumesService implements VolumeBinder {
  constructor(
    private readonly repo: VolumesRepo,
    private readonly store: VolumeStore | null,
    private readonly nodes: NodeRegistry,
    readonly backups: VolumeBackups,
  ) {}

  private bytes(): VolumeStore {
    if (!this.store) throw errors.notImplemented('volumes on this sandbox driver');
    return this.store;
  }

  private async view(r: VolumeRow, usedBytes?: number) {
    const [rows, lost, last] = await Promise.all([
      this.repo.mountsOfVolume(r.id),
      this.nodes.lostReason(r.nodeId),
      this.backups.last(r.ownerId, r.id),
    ]);
    const mounts = rows.filter((m) => !m.held);
    return {
      id: r.id,
      name: r.name,
      status: lost ? ('lost' as const) : r.status,
      error: lost ? this.lostMessage(r, lost, last?.id) : r.error,
      sizeGB: r.sizeBytes / GB,
      sizeBytes: r.sizeBytes,
      usedBytes: lost ? null : (usedBytes ?? null),
      nodeId: r.nodeId,
      sourceId: r.sourceId,
      lastBackupId: last?.id ?? null,
      mounts: mounts.map((m) => ({ sandboxId: m.sandboxId, path: m.path, readOnly: m.readOnly })),
      heldBy: rows.filter((m) => m.held).map((m) => m.sandboxId),
      createdAt: iso(r.createdAt),
    };
  }

  private lostMessage(r: VolumeRow, reason: string, lastBackupId: string | undefined): string {
    const way = lastBackupId
      ? `its last backup ${lastBackupId} restores onto another node: POST /volumes {"name": "...", "fromBackupId": "${lastBackupId}"}`
      : 'it has no backup';
    return `volume ${r.id} is lost (${reason}): ${way}`;
  }

  /** 409 VolumeLost when its node is down; 409 VolumeNotReady while restoring or after a failed restore. */
  private async usable(r: VolumeRow): Promise<void> {
    const lost = await this.nodes.lostReason(r.nodeId);
    if (lost) {
      const last = await this.backups.last(r.ownerId, r.id);
      throw errors.conflict(this.lostMessage(r, lost, last?.id), 'VolumeLost', {
        volumeId: r.id,
        lastBackupId: last?.id ?? null,
      });
    }
    if (r.status !== 'ready')
      throw errors.conflict(
        r.status === 'restoring'
          ? `volume ${r.id} is being restored from its backup: retry once GET /volumes/${r.id} says ready`
          : `volume ${r.id} could not be restored (${r.error}): delete it`,
        'VolumeNotReady',
        { volumeId: r.id, status: r.status },
      );
  }

  /**
   * 402 when the account would pass its plan's volumes or their total size: a new volume of `addBytes`
   * (`newVolume`), or a volume growing from `fromBytes` to `addBytes`.
   */
  private async allow(p: Principal, addBytes: number, newVolume: boolean, fromBytes = 0): Promise<void> {
    const plan = PLANS[p.plan];
    const t = await this.repo.totals(p.ownerId);
    if (newVolume && t.count >= plan.volumes)
      throw errors.paymentRequired(
        `your ${plan.title} plan allows ${plan.volumes} volumes and you have ${t.count}: delete one or change plan`,
        'VolumeLimitReached',
        { limit: plan.volumes, current: t.count },
      );
    const after = t.bytes - fromBytes + addBytes;
    if (after > plan.volumeGB * GB)
      throw errors.paymentRequired(
        `your ${plan.title} plan allows ${plan.volumeGB} GiB of volumes in all; ${t.bytes / GB} GiB are taken and this would make ${after / GB} GiB`,
        'VolumeSpaceExceeded',
        { limitGB: plan.volumeGB, usedGB: t.bytes / GB, requestedGB: (addBytes - fromBytes) / GB },
      );
  }

  private snapView(s: SnapshotRow) {
    return {
      id: s.id,
      volumeId: s.volumeId,
      sizeBytes: s.sizeBytes,
      nodeId: s.nodeId,
      createdAt: iso(s.createdAt),
    };
  }

  /** The caller's volume, usable and on this node (another node's request is relayed there). */
  private async own(p: Principal, id: string): Promise<VolumeRow> {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('volume');
    await this.usable(row);
    await this.nodes.assertHere(row.nodeId, 'volume');
    return row;
  }

  async create(p: Principal, input: CreateVolumeInput) {
    const store = this.bytes();
    if (input.fromBackupId !== undefined) return this.restore(p, input, input.fromBackupId);
    let from: { volume: string } | { snapshot: string } | undefined;
    let sourceBytes = 0;
    let sourceUsed = 0;
    if (input.fromVolumeId !== undefined) {
      const src = await this.own(p, input.fromVolumeId);
      from = { volume: src.id };
      sourceBytes = src.sizeBytes;
    } else if (input.fromSnapshotId !== undefined) {
      const s = await this.repo.getSnapshot(p.ownerId, input.fromSnapshotId);
      if (!s) throw errors.notFound('volume snapshot');
      await this.nodes.assertHere(s.nodeId, 'volume snapshot');
      from = { snapshot: s.id };
      sourceBytes = s.sizeBytes;
      sourceUsed = s.usedBytes;
    }
    const sizeBytes = input.sizeGB !== undefined ? input.sizeGB * GB : sourceBytes;
    if (!sizeBytes)
      throw errors.badRequest('sizeGB is required for an empty volume', [
        { path: ['sizeGB'], message: 'required' },
      ]);
    await this.allow(p, sizeBytes, true);
    const row = this.newRow(p, input.name, sizeBytes, input.fromVolumeId ?? input.fromSnapshotId ?? null, 'ready');
    if (from) {
      // A copy holds what its source holds: it must fit in its own limit.
      const used = 'volume' in from ? await rt(store.usedBytes(from.volume)) : sourceUsed;
      if (used > sizeBytes) throw this.tooSmall(used, sizeBytes);
    }
    await rt(store.create(row.id, sizeBytes, from));
    try {
      await this.repo.insert(row);
    } catch (e) {
      await store.remove(row.id).catch(() => {});
      throw e;
    }
    return this.view(row, from ? undefined : 0);
  }

  /** The record of a new volume on this node. */
  private newRow(p: Principal, name: string, sizeBytes: number, sourceId: string | null, status: VolumeRow['status']): VolumeRow {
    return { id: newId('vol'), ownerId: p.ownerId, name, sizeBytes, nodeId: this.nodes.id, sourceId, status, error: null, createdAt: Date.now() };
  }

  /** A new volume on this node, `restoring` until the backup's job has filled it (then `ready` or `failed`). */
  private async restore(p: Principal, input: CreateVolumeInput, backupId: string) {
    const b = await this.backups.restorable(p, backupId);
    const sizeBytes = input.sizeGB !== undefined ? input.sizeGB * GB : b.volume_size_bytes;
    if (b.used_bytes > sizeBytes) throw this.tooSmall(b.used_bytes, sizeBytes);
    await this.allow(p, sizeBytes, true);
    const row = this.newRow(p, input.name, sizeBytes, b.id, 'restoring');
    await this.repo.insert(row);
    await this.backups.queueRestore(row, b);
    return this.view(row);
  }

  private tooSmall(used: number, asked: number) {
    return errors.badRequest(
      `the volume holds ${used} bytes, more than ${asked}: delete files first or ask for more`,
      [{ path: ['sizeGB'], message: `below the ${used} bytes in use` }],
      'VolumeTooSmall',
    );
  }

  async list(p: Principal) {
    const rows = await this.repo.list(p.ownerId);
    return { items: await Promise.all(rows.map((r) => this.view(r))) };
  }

  /** Any state: a lost, restoring or failed volume is shown with its status and why. */
  async get(p: Principal, id: string) {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('volume');
    if (row.status !== 'ready' || (await this.nodes.lostReason(row.nodeId))) return this.view(row);
    await this.nodes.assertHere(row.nodeId, 'volume');
    return this.view(row, await rt(this.bytes().usedBytes(row.id)));
  }

  /**
   * The host directory holding the caller's volume and the host ids its sandboxes' ids are (E2B's
   * volume content API works on it).
   */
  async directory(p: Principal, id: string): Promise<{ path: string; ids: { base: number; count: number } }> {
    const row = await this.own(p, id);
    const store = this.bytes();
    return { path: await store.path(row.id), ids: store.ids };
  }

  async resize(p: Principal, id: string, sizeGB: number) {
    const row = await this.own(p, id);
    const store = this.bytes();
    const used = await rt(store.usedBytes(row.id));
    const sizeBytes = sizeGB * GB;
    if (sizeBytes < used) throw this.tooSmall(used, sizeBytes);
    if (sizeBytes > row.sizeBytes) await this.allow(p, sizeBytes, false, row.sizeBytes);
    await rt(store.resize(row.id, sizeBytes));
    await this.repo.resize(row.id, sizeBytes);
    return this.view({ ...row, sizeBytes }, used);
  }

  /** A lost volume's rows go (its bytes stay on its dead node); a failed restore's too. */
  async delete(p: Principal, id: string): Promise<void> {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('volume');
    if (await this.nodes.lostReason(row.nodeId)) {
      await this.repo.deleteWithMounts(row.id);
      return;
    }
    if (row.status === 'restoring') await this.usable(row);
    await this.nodes.assertHere(row.nodeId, 'volume');
    if (!(await this.repo.deleteUnmounted(row.id))) {
      const rows = await this.repo.mountsOfVolume(row.id);
      const sandboxes = rows.filter((m) => !m.held).map((m) => m.sandboxId);
      const heldBy = rows.filter((m) => m.held).map((m) => m.sandboxId);
      throw errors.conflict(
        'the volume is mounted: delete those sandboxes (and the machines or agents holding it) first',
        'VolumeInUse',
        { sandboxes, heldBy },
      );
    }
    await rt(this.bytes().remove(row.id));
  }

  async snapshot(p: Principal, id: string) {
    const row = await this.own(p, id);
    const store = this.bytes();
    const snapId = newId('vsn');
    await rt(store.snapshot(row.id, snapId));
    const s: SnapshotRow = {
      id: snapId,
      ownerId: p.ownerId,
      volumeId: row.id,
      nodeId: row.nodeId,
      sizeBytes: row.sizeBytes,
      // Measured on the snapshot (read-only: it no longer changes), not on the volume still written.
      usedBytes: await rt(store.snapshotUsedBytes(snapId)),
      createdAt: Date.now(),
    };
    try {
      await this.repo.insertSnapshot(s);
    } catch (e) {
      await store.removeSnapshot(s.id).catch(() => {});
      throw e;
    }
    return this.snapView(s);
  }

  /** Starts a backup on the volume's node (`running`: poll GET /volume-backups/{id}). */
  async backup(p: Principal, id: string) {
    const row = await this.own(p, id);
    this.bytes();
    return this.backups.start(row);
  }

  /** Its backups, also once the volume is lost or deleted (404 when the caller has neither). */
  async backupsOf(p: Principal, id: string) {
    const list = await this.backups.list(p, id);
    if (!list.items.length && !(await this.repo.get(p.ownerId, id))) throw errors.notFound('volume');
    return list;
  }

  async snapshots(p: Principal, id: string) {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('volume');
    return { items: (await this.repo.snapshotsOf(p.ownerId, id)).map((s) => this.snapView(s)) };
  }

  async deleteSnapshot(p: Principal, snapshotId: string): Promise<void> {
    const s = await this.repo.getSnapshot(p.ownerId, snapshotId);
    if (!s) throw errors.notFound('volume snapshot');
    await this.nodes.assertHere(s.nodeId, 'volume snapshot');
    await rt(this.bytes().removeSnapshot(s.id));
    await this.repo.deleteSnapshot(s.id);
  }

  // VolumeBinder: the sandboxes area's side.

  async nodeOf(ownerId: string, mounts: SandboxVolume[]): Promise<string | null> {
    this.bytes();
    const seen = new Set<string>();
    const nodes = new Set<string | null>();
    for (const [i, m] of mounts.entries()) {
      if (seen.has(m.volumeId))
        throw errors.badRequest('a volume is mounted once per sandbox', [
          { path: ['volumes', i, 'volumeId'], message: 'mounted twice' },
        ]);
      seen.add(m.volumeId);
      const row = await this.repo.get(ownerId, m.volumeId);
      if (!row) throw errors.notFound('volume');
      await this.usable(row);
      nodes.add(row.nodeId);
    }
    if (nodes.size > 1)
      throw errors.badRequest('the volumes are on different nodes: a sandbox mounts volumes of one node', [
        { path: ['volumes'], message: 'on different nodes' },
      ]);
    return [...nodes][0] ?? null;
  }

  async attach(ownerId: string, sandboxId: string, mounts: SandboxVolume[], holder?: string): Promise<void> {
    for (const m of mounts) if (!(await this.repo.get(ownerId, m.volumeId))) throw errors.notFound('volume');
    if (holder !== undefined) {
      // A holder's box mounts what its holder holds, as held: it takes no writer slot of its own.
      const holds = await this.repo.mountsOfSandbox(holder);
      for (const m of mounts) {
        const h = holds.find((x) => x.volumeId === m.volumeId);
        if (!h?.held || (h.readOnly && !m.readOnly))
          throw errors.conflict(`${holder} does not hold ${m.volumeId} for writing`, 'VolumeBusy');
      }
    }
    await this.insert(sandboxId, mounts, { underHold: holder !== undefined });
  }

  /**
   * A machine or an agent holds the volumes across its boxes (404 for another account's, 409
   * `VolumeBusy` for a second writer); its boxes mount them with attach(..., holder). The node holding them.
   */
  async hold(ownerId: string, holderId: string, mounts: SandboxVolume[]): Promise<string | null> {
    const node = await this.nodeOf(ownerId, mounts);
    await this.insert(holderId, mounts, { held: true });
    return node;
  }

  async release(holderId: string): Promise<void> {
    await this.repo.deleteMounts(holderId);
  }

  private async insert(
    sandboxId: string,
    mounts: SandboxVolume[],
    how: { held?: boolean; underHold?: boolean },
  ): Promise<void> {
    const now = Date.now();
    try {
      await this.repo.insertMounts(
        mounts.map((m) => ({ volumeId: m.volumeId, sandboxId, path: m.path, readOnly: m.readOnly, ...how })),
        now,
      );
    } catch (e) {
      if (!isUniqueViolation(e)) throw e;
      const busy: string[] = [];
      for (const m of mounts) {
        if (m.readOnly) continue;
        const writer = (await this.repo.mountsOfVolume(m.volumeId)).find((x) => !x.readOnly);
        if (writer) busy.push(`${m.volumeId} (written by ${writer.sandboxId})`);
      }
      throw errors.conflict(
        `a sandbox writes to ${busy.join(', ') || 'the volume'} already: mount it readOnly, or delete that sandbox first`,
        'VolumeBusy',
      );
    }
  }

  async mountsOf(sandboxId: string): Promise<VolumeMount[]> {
    const rows = await this.repo.mountsOfSandbox(sandboxId);
    if (!rows.length) return [];
    const store = this.bytes();
    return Promise.all(
      rows.map(async (m) => ({ source: await store.path(m.volumeId), target: m.path, readOnly: m.readOnly })),
    );
  }

  async listOf(sandboxId: string): Promise<SandboxVolume[]> {
    return (await this.repo.mountsOfSandbox(sandboxId)).map((m) => ({
      volumeId: m.volumeId,
      path: m.path,
      readOnly: m.readOnly,
    }));
  }

  /**
   * At start: mounts of sandboxes whose record is gone (removed while nube was down, or by the
   * sandboxes area's reconcile, which runs before this area exists) no longer hold their volumes.
   */
  async sweep(exists: (sandboxId: string) => Promise<boolean>): Promise<number> {
    let n = 0;
    for (const id of await this.repo.mountedSandboxes()) {
      if (await exists(id)) continue;
      await this.repo.deleteMounts(id);
      n++;
    }
    return n;
  }

  async detach(sandboxId: string): Promise<void> {
    await this.repo.deleteMounts(sandboxId);
  }
}
