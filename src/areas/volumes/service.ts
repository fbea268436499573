// Volumes (issue 33): quota-limited directories on a node's sandbox store that outlive sandboxes,
// mounted into them (the sandboxes area asks this service through its VolumeBinder), snapshotted and
// copied copy-on-write. The bytes are the sandboxes driver's (VolumeStore); the rows are this area's.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { NodeRegistry } from '../../platform/nodes.js';
import type { SandboxVolume, VolumeBinder } from '../sandboxes/volume-binder.js';
import type { VolumeMount, VolumeStore } from '../sandboxes/runtime/driver.js';
import { rt } from '../sandboxes/views.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { SnapshotRow, VolumeRow, VolumesRepo } from './repo.js';

const GB = 1024 ** 3;

export interface CreateVolumeInput {
  name: string;
  sizeGB?: number;
  fromVolumeId?: string;
  fromSnapshotId?: string;
}

const iso = (ms: number) => new Date(ms).toISOString();

export class VolumesService implements VolumeBinder {
  constructor(
    private readonly repo: VolumesRepo,
    private readonly store: VolumeStore | null,
    private readonly nodes: NodeRegistry,
  ) {}

  private bytes(): VolumeStore {
    if (!this.store) throw errors.notImplemented('volumes on this sandbox driver');
    return this.store;
  }

  private async view(r: VolumeRow, usedBytes?: number) {
    const rows = await this.repo.mountsOfVolume(r.id);
    const mounts = rows.filter((m) => !m.held);
    return {
      id: r.id,
      name: r.name,
      sizeGB: r.sizeBytes / GB,
      sizeBytes: r.sizeBytes,
      usedBytes: usedBytes ?? null,
      nodeId: r.nodeId,
      sourceId: r.sourceId,
      mounts: mounts.map((m) => ({ sandboxId: m.sandboxId, path: m.path, readOnly: m.readOnly })),
      heldBy: rows.filter((m) => m.held).map((m) => m.sandboxId),
      createdAt: iso(r.createdAt),
    };
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

  /** The caller's volume, on this node (another node's request is relayed there). */
  private async own(p: Principal, id: string): Promise<VolumeRow> {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('volume');
    await this.nodes.assertHere(row.nodeId, 'volume');
    return row;
  }

  async create(p: Principal, input: CreateVolumeInput) {
    const store = this.bytes();
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
    const row: VolumeRow = {
      id: newId('vol'),
      ownerId: p.ownerId,
      name: input.name,
      sizeBytes,
      nodeId: this.nodes.id,
      sourceId: input.fromVolumeId ?? input.fromSnapshotId ?? null,
      createdAt: Date.now(),
    };
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

  async get(p: Principal, id: string) {
    const row = await this.own(p, id);
    return this.view(row, await rt(this.bytes().usedBytes(row.id)));
  }

  async resize(p: Principal, id: string, sizeGB: number) {
    const row = await this.own(p, id);
    const store = this.bytes();
    const used = await rt(store.usedBytes(row.id));
    const sizeBytes = sizeGB * GB;
    if (sizeBytes < used) throw this.tooSmall(used, sizeBytes);
    await rt(store.resize(row.id, sizeBytes));
    await this.repo.resize(row.id, sizeBytes);
    return this.view({ ...row, sizeBytes }, used);
  }

  async delete(p: Principal, id: string): Promise<void> {
    const row = await this.own(p, id);
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
