import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

interface VolumesTable {
  id: string;
  owner_id: string;
  name: string;
  size_bytes: number;
  /** The node whose store holds it; null on a single node before nodes registered. */
  node_id: string | null;
  /** What it was copied from (a volume, a snapshot or a backup), null for an empty one. */
  source_id: string | null;
  /** `ready`, or `restoring` from a backup (a job fills it) or `failed` (that restore did not). */
  status: VolumeStatus;
  /** Why the restore failed. */
  error: string | null;
  created_at: number;
}

interface VolumeMountsTable {
  volume_id: string;
  sandbox_id: string;
  path: string;
  read_only: number;
  /** The volume's id for its writer, null for readers: unique, so two writers cannot both commit. */
  writer_of: string | null;
  /**
   * 1: a hold by a machine or an agent (sandbox_id is its id) that keeps the volume, and its writer
   * slot, across that holder's boxes; the box's own rows then carry no writer_of. 0: a sandbox's mount.
   */
  held: number;
  created_at: number;
}

interface VolumeSnapshotsTable {
  id: string;
  owner_id: string;
  volume_id: string;
  node_id: string | null;
  size_bytes: number;
  /** What the volume held when it was taken: the least a copy's limit may be. */
  used_bytes: number;
  created_at: number;
}

export type VolumeStatus = 'ready' | 'restoring' | 'failed';
export type BackupStatus = 'running' | 'completed' | 'failed';

interface VolumeBackupsTable {
  id: string;
  owner_id: string;
  /** The volume it copies; it may be deleted since (a backup outlives its volume). */
  volume_id: string;
  volume_name: string;
  /** The node that took it (where its job runs); a restore goes to any node. */
  node_id: string | null;
  status: BackupStatus;
  /** The volume's limit then: a restore's default size. */
  volume_size_bytes: number;
  /** What the volume held (on its snapshot): the least a restore's limit may be. */
  used_bytes: number;
  /** Bytes in the blob store (compressed tar) and their SHA-256, checked on every restore. */
  size_bytes: number;
  sha256: string | null;
  blob_key: string;
  /** uid 0 of sandboxes on the store that took it (owners in the tar are shifted by it). */
  uid_base: number;
  error: string | null;
  created_at: number;
  completed_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    volumes: VolumesTable;
    volume_mounts: VolumeMountsTable;
    volume_snapshots: VolumeSnapshotsTable;
    volume_backups: VolumeBackupsTable;
  }
}

export const volumesMigrations: Record<string, Migration> = {
  '0253-volume-holds': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('volume_mounts')
        .addColumn('held', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
  '0250-volumes': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('volumes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('node_id', 'text')
        .addColumn('source_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('volumes_owner').on('volumes').columns(['owner_id', 'id']).execute();
      await db.schema
        .createTable('volume_mounts')
        .addColumn('volume_id', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('path', 'text', (c) => c.notNull())
        .addColumn('read_only', 'integer', (c) => c.notNull())
        .addColumn('writer_of', 'text', (c) => c.unique())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('volume_mounts_pk', ['sandbox_id', 'volume_id'])
        .execute();
      await db.schema
        .createIndex('volume_mounts_volume')
        .on('volume_mounts')
        .columns(['volume_id'])
        .execute();
      await db.schema
        .createTable('volume_snapshots')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('volume_id', 'text', (c) => c.notNull())
        .addColumn('node_id', 'text')
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('used_bytes', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('volume_snapshots_owner')
        .on('volume_snapshots')
        .columns(['owner_id', 'id'])
        .execute();
    },
  },
  '0251-volume-backups': {
    async up(db: Kysely<unknown>) {
      // One column per statement: SQLite's ALTER TABLE adds one at a time.
      await db.schema
        .alterTable('volumes')
        .addColumn('status', 'text', (c) => c.notNull().defaultTo('ready'))
        .execute();
      await db.schema.alterTable('volumes').addColumn('error', 'text').execute();
      await db.schema
        .createTable('volume_backups')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('volume_id', 'text', (c) => c.notNull())
        .addColumn('volume_name', 'text', (c) => c.notNull())
        .addColumn('node_id', 'text')
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('volume_size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('used_bytes', 'bigint', (c) => c.notNull())
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('sha256', 'text')
        .addColumn('blob_key', 'text', (c) => c.notNull())
        .addColumn('uid_base', 'bigint', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('completed_at', 'bigint')
        .execute();
      await db.schema
        .createIndex('volume_backups_volume')
        .on('volume_backups')
        .columns(['owner_id', 'volume_id', 'id'])
        .execute();
    },
  },
};

export interface VolumeRow {
  id: string;
  ownerId: string;
  name: string;
  sizeBytes: number;
  nodeId: string | null;
  sourceId: string | null;
  status: VolumeStatus;
  error: string | null;
  createdAt: number;
}

export interface MountRow {
  volumeId: string;
  /** The sandbox, or for a hold the machine or agent. */
  sandboxId: string;
  path: string;
  readOnly: boolean;
  /** A machine's or an agent's hold (see VolumeMountsTable.held). */
  held?: boolean;
  /** A box of a holder: writes under its holder's writer slot, so takes none of its own. */
  underHold?: boolean;
}

export interface SnapshotRow {
  id: string;
  ownerId: string;
  volumeId: string;
  nodeId: string | null;
  sizeBytes: number;
  usedBytes: number;
  createdAt: number;
}

const vol = (r: VolumesTable): VolumeRow => ({
  id: r.id,
  ownerId: r.owner_id,
  name: r.name,
  sizeBytes: Number(r.size_bytes),
  nodeId: r.node_id,
  sourceId: r.source_id,
  status: r.status,
  error: r.error,
  createdAt: Number(r.created_at),
});

const mount = (r: VolumeMountsTable): MountRow => ({
  volumeId: r.volume_id,
  sandboxId: r.sandbox_id,
  path: r.path,
  readOnly: Number(r.read_only) === 1,
  held: Number(r.held) === 1,
});

const snap = (r: VolumeSnapshotsTable): SnapshotRow => ({
  id: r.id,
  ownerId: r.owner_id,
  volumeId: r.volume_id,
  nodeId: r.node_id,
  sizeBytes: Number(r.size_bytes),
  usedBytes: Number(r.used_bytes),
  createdAt: Number(r.created_at),
});

export type BackupRow = VolumeBackupsTable;

/** PostgreSQL returns bigint columns as strings: numbers here. */
const backup = (r: VolumeBackupsTable): BackupRow => ({
  ...r,
  volume_size_bytes: Number(r.volume_size_bytes),
  used_bytes: Number(r.used_bytes),
  size_bytes: Number(r.size_bytes),
  uid_base: Number(r.uid_base),
  created_at: Number(r.created_at),
  completed_at: r.completed_at === null ? null : Number(r.completed_at),
});

export class VolumesRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(r: VolumeRow): Promise<void> {
    await this.db
      .insertInto('volumes')
      .values({
        id: r.id,
        owner_id: r.ownerId,
        name: r.name,
        size_bytes: r.sizeBytes,
        node_id: r.nodeId,
        source_id: r.sourceId,
        status: r.status,
        error: r.error,
        created_at: r.createdAt,
      })
      .execute();
  }

  async get(ownerId: string, id: string): Promise<VolumeRow | undefined> {
    const r = await this.db
      .selectFrom('volumes')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r && vol(r);
  }

  async list(ownerId: string): Promise<VolumeRow[]> {
    const rows = await this.db
      .selectFrom('volumes')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .orderBy('id', 'desc')
      .execute();
    return rows.map(vol);
  }

  async countFor(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('volumes')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  async resize(id: string, sizeBytes: number): Promise<void> {
    await this.db.updateTable('volumes').set({ size_bytes: sizeBytes }).where('id', '=', id).execute();
  }

  /** Deletes the volume unless a sandbox mounts it (checked in the same transaction); false then. */
  async deleteUnmounted(id: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const held = await trx
        .selectFrom('volume_mounts')
        .select('sandbox_id')
        .where('volume_id', '=', id)
        .executeTakeFirst();
      if (held) return false;
      await trx.deleteFrom('volumes').where('id', '=', id).execute();
      return true;
    });
  }

  /** All of them or none; a unique violation (a second writer) rolls back the others. */
  async insertMounts(rows: MountRow[], now: number): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      for (const m of rows) {
        await trx
          .insertInto('volume_mounts')
          .values({
            volume_id: m.volumeId,
            sandbox_id: m.sandboxId,
            path: m.path,
            read_only: m.readOnly ? 1 : 0,
            writer_of: m.readOnly || m.underHold ? null : m.volumeId,
            held: m.held ? 1 : 0,
            created_at: now,
          })
          .execute();
      }
    });
  }

  /** A sandbox's mounts, or a holder's holds. */
  async mountsOfSandbox(sandboxId: string): Promise<MountRow[]> {
    const rows = await this.db
      .selectFrom('volume_mounts')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .orderBy('path')
      .execute();
    return rows.map(mount);
  }

  async mountsOfVolume(volumeId: string): Promise<MountRow[]> {
    const rows = await this.db
      .selectFrom('volume_mounts')
      .selectAll()
      .where('volume_id', '=', volumeId)
      .orderBy('sandbox_id')
      .execute();
    return rows.map(mount);
  }

  async mountedSandboxes(): Promise<string[]> {
    const rows = await this.db
      .selectFrom('volume_mounts')
      .select('sandbox_id')
      .where('held', '=', 0)
      .distinct()
      .execute();
    return rows.map((r) => r.sandbox_id);
  }

  async deleteMounts(sandboxId: string): Promise<void> {
    await this.db.deleteFrom('volume_mounts').where('sandbox_id', '=', sandboxId).execute();
  }

  async insertSnapshot(r: SnapshotRow): Promise<void> {
    await this.db
      .insertInto('volume_snapshots')
      .values({
        id: r.id,
        owner_id: r.ownerId,
        volume_id: r.volumeId,
        node_id: r.nodeId,
        size_bytes: r.sizeBytes,
        used_bytes: r.usedBytes,
        created_at: r.createdAt,
      })
      .execute();
  }

  async getSnapshot(ownerId: string, id: string): Promise<SnapshotRow | undefined> {
    const r = await this.db
      .selectFrom('volume_snapshots')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r && snap(r);
  }

  async snapshotsOf(ownerId: string, volumeId: string): Promise<SnapshotRow[]> {
    const rows = await this.db
      .selectFrom('volume_snapshots')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('volume_id', '=', volumeId)
      .orderBy('id', 'desc')
      .execute();
    return rows.map(snap);
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.db.deleteFrom('volume_snapshots').where('id', '=', id).execute();
  }

  /** A volume by id whoever owns it (jobs). */
  async byId(id: string): Promise<VolumeRow | undefined> {
    const r = await this.db.selectFrom('volumes').selectAll().where('id', '=', id).executeTakeFirst();
    return r && vol(r);
  }

  /** Volumes and the sum of their limits: what a plan's allowance counts. */
  async totals(ownerId: string): Promise<{ count: number; bytes: number }> {
    const r = await this.db
      .selectFrom('volumes')
      .select((eb) => [eb.fn.countAll<number>().as('n'), eb.fn.sum<number>('size_bytes').as('bytes')])
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return { count: Number(r?.n ?? 0), bytes: Number(r?.bytes ?? 0) };
  }

  async setStatus(id: string, status: VolumeStatus, error: string | null = null): Promise<void> {
    await this.db.updateTable('volumes').set({ status, error }).where('id', '=', id).execute();
  }

  /** A lost volume's rows (its node is down): mounts of its sandboxes, lost with it, go too. */
  async deleteWithMounts(id: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('volume_mounts').where('volume_id', '=', id).execute();
      await trx.deleteFrom('volumes').where('id', '=', id).execute();
    });
  }

  async insertBackup(r: BackupRow): Promise<void> {
    await this.db.insertInto('volume_backups').values(r).execute();
  }

  async updateBackup(id: string, patch: Partial<BackupRow>): Promise<void> {
    await this.db.updateTable('volume_backups').set(patch).where('id', '=', id).execute();
  }

  /** The caller's backup (ownerId), or any (undefined: jobs). */
  async getBackup(ownerId: string | undefined, id: string): Promise<BackupRow | undefined> {
    let q = this.db.selectFrom('volume_backups').selectAll().where('id', '=', id);
    if (ownerId !== undefined) q = q.where('owner_id', '=', ownerId);
    const r = await q.executeTakeFirst();
    return r && backup(r);
  }

  /** Newest first. */
  async backupsOf(ownerId: string, volumeId: string): Promise<BackupRow[]> {
    const rows = await this.db
      .selectFrom('volume_backups')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('volume_id', '=', volumeId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .execute();
    return rows.map(backup);
  }

  async deleteBackup(id: string): Promise<void> {
    await this.db.deleteFrom('volume_backups').where('id', '=', id).execute();
  }
}
