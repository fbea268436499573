// Backups of volumes to the blob store (issue 33): a job on the volume's node snapshots it (a
// consistent copy whatever writes meanwhile), streams a zstd tar of the snapshot to the blob store
// (never whole in memory; SHA-256 computed on the way) and drops the snapshot. A restore is a new
// volume on any node: a job there streams the blob back into it and checks the SHA-256 before the
// volume is `ready`. Backups outlive their volume: a lost volume's last one is what brings it back.
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { BlobStore } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cutShort, type JobContext, type JobQueue } from '../../platform/jobs-contract.js';
import type { NodeRegistry } from '../../platform/nodes.js';
import type { VolumeStore } from '../sandboxes/runtime/driver.js';
import type { BackupRow, VolumeRow, VolumesRepo } from './repo.js';

export const BACKUP_JOB = 'volumes.backup';
export const RESTORE_JOB = 'volumes.restore';
/** Completed backups kept per volume: an older one goes when a newer one completes. */
export const KEEP_BACKUPS = 7;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
type Cut = Pick<JobContext, 'signal' | 'stopping'>;

export class VolumeBackups {
  constructor(
    private readonly repo: VolumesRepo,
    private readonly store: () => VolumeStore,
    private readonly blobs: () => BlobStore,
    private readonly jobs: JobQueue,
    private readonly nodes: NodeRegistry,
    private readonly log: { warn(obj: unknown, msg: string): void },
  ) {}

  async view(b: BackupRow) {
    // A backup whose node died while taking it never completes: it is failed, not running forever.
    const lost = b.status === 'running' ? await this.nodes.lostReason(b.node_id) : null;
    return {
      id: b.id,
      volumeId: b.volume_id,
      volumeName: b.volume_name,
      status: lost ? ('failed' as const) : b.status,
      error: lost ? `not finished: ${lost}` : b.error,
      sizeBytes: b.size_bytes,
      usedBytes: b.used_bytes,
      volumeSizeBytes: b.volume_size_bytes,
      sha256: b.sha256,
      nodeId: b.node_id,
      createdAt: iso(b.created_at)!,
      completedAt: iso(b.completed_at),
    };
  }

  /** The caller's backup: 404 for another account's. */
  async own(p: Principal, id: string): Promise<BackupRow> {
    const b = await this.repo.getBackup(p.ownerId, id);
    if (!b) throw errors.notFound('volume backup');
    return b;
  }

  async list(p: Principal, volumeId: string) {
    const rows = await this.repo.backupsOf(p.ownerId, volumeId);
    return { items: await Promise.all(rows.map((b) => this.view(b))) };
  }

  /** The newest completed backup of a volume, or undefined. */
  async last(ownerId: string, volumeId: string): Promise<BackupRow | undefined> {
    return (await this.repo.backupsOf(ownerId, volumeId)).find((b) => b.status === 'completed');
  }

  /** Records a running backup of `v` (the caller checked it is the caller's, ready and here) and queues it. */
  async start(v: VolumeRow) {
    const id = newId('vbk');
    const b: BackupRow = {
      id,
      owner_id: v.ownerId,
      volume_id: v.id,
      volume_name: v.name,
      node_id: v.nodeId,
      status: 'running',
      volume_size_bytes: v.sizeBytes,
      used_bytes: 0,
      size_bytes: 0,
      sha256: null,
      blob_key: `volume-backups/${v.ownerId}/${v.id}/${id}.tar.zst`,
      uid_base: this.store().uidBase,
      error: null,
      created_at: Date.now(),
      completed_at: null,
    };
    await this.repo.insertBackup(b);
    await this.jobs.enqueue(
      this.nodes.jobType(BACKUP_JOB, v.nodeId),
      { backupId: id },
      { key: `volume-backup:${id}` },
    );
    return this.view(b);
  }

  /** The backup job, on the volume's node. A run cut by nube's stop is retried from the start. */
  async run(job: { backupId: string }, ctx: Cut): Promise<void> {
    const b = await this.repo.getBackup(undefined, job.backupId);
    if (b?.status !== 'running') return;
    const store = this.store();
    // The snapshot is named after the backup: one an earlier attempt left is dropped first.
    await store.removeSnapshot(b.id);
    let archive: Readable | undefined;
    try {
      await store.snapshot(b.volume_id, b.id);
      const used = await store.snapshotUsedBytes(b.id);
      const tar = await store.archive(b.id);
      archive = tar.stream;
      const put = await this.blobs().put(b.blob_key, tar.stream, { contentType: 'application/zstd' });
      await tar.done;
      const done = {
        status: 'completed' as const,
        used_bytes: used,
        size_bytes: put.size,
        sha256: put.sha256,
        completed_at: Date.now(),
      };
      await this.repo.updateBackup(b.id, done);
      await this.prune(b.owner_id, b.volume_id);
    } catch (e) {
      // A tar whose reader gave up must not block on its pipe.
      archive?.destroy();
      await this.blobs()
        .delete(b.blob_key)
        .catch(() => {});
      if (cutShort(ctx)) throw e;
      this.log.warn({ err: e, backup: b.id, volume: b.volume_id }, 'volume backup failed');
      await this.repo.updateBackup(b.id, {
        status: 'failed',
        error: (e as Error).message,
        completed_at: Date.now(),
      });
    } finally {
      await store.removeSnapshot(b.id).catch(() => {});
    }
  }

  /** Keeps the newest KEEP_BACKUPS completed backups of the volume. */
  private async prune(ownerId: string, volumeId: string): Promise<void> {
    const done = (await this.repo.backupsOf(ownerId, volumeId)).filter((b) => b.status === 'completed');
    for (const b of done.slice(KEEP_BACKUPS)) await this.drop(b);
  }

  private async drop(b: BackupRow): Promise<void> {
    await this.blobs().delete(b.blob_key);
    await this.repo.deleteBackup(b.id);
  }

  async delete(p: Principal, id: string): Promise<void> {
    const b = await this.own(p, id);
    if ((await this.view(b)).status === 'running')
      throw errors.conflict(
        'the backup is being taken: delete it once it completed or failed',
        'BackupRunning',
      );
    await this.drop(b);
  }

  /** A completed backup a new volume may start from (409 otherwise). */
  async restorable(p: Principal, id: string): Promise<BackupRow> {
    const b = await this.own(p, id);
    const status = (await this.view(b)).status;
    if (status !== 'completed')
      throw errors.conflict(`the backup is ${status}, not completed`, 'BackupNotRestorable');
    return b;
  }

  /** Queues the restore of `b` into `v`, a volume row just made `restoring` on this node. */
  async queueRestore(v: VolumeRow, b: BackupRow): Promise<void> {
    await this.jobs.enqueue(
      this.nodes.jobType(RESTORE_JOB, v.nodeId),
      { volumeId: v.id, backupId: b.id },
      { key: `volume-restore:${v.id}` },
    );
  }

  /** The restore job, on the new volume's node: `ready` once every byte is in and the SHA-256 matched. */
  async runRestore(job: { volumeId: string; backupId: string }, ctx: Cut): Promise<void> {
    const v = await this.repo.byId(job.volumeId);
    if (v?.status !== 'restoring') return;
    const store = this.store();
    // What an attempt cut short wrote goes first.
    await store.remove(v.id);
    try {
      const b = await this.repo.getBackup(undefined, job.backupId);
      if (!b?.sha256) throw new Error(`backup ${job.backupId} is gone`);
      const got = await this.blobs().get(b.blob_key);
      const hash = createHash('sha256');
      const counted = Readable.from(
        (async function* () {
          for await (const chunk of got.stream) {
            hash.update(chunk as Buffer);
            yield chunk as Buffer;
          }
        })(),
      );
      await store.restore(v.id, v.sizeBytes, counted, b.uid_base);
      const sum = hash.digest('hex');
      if (sum !== b.sha256) {
        await store.remove(v.id);
        throw new Error(
          `the backup's SHA-256 does not match: ${sum} read, ${b.sha256} recorded when it was taken`,
        );
      }
      await this.repo.setStatus(v.id, 'ready');
    } catch (e) {
      if (cutShort(ctx)) throw e;
      this.log.warn({ err: e, volume: v.id, backup: job.backupId }, 'volume restore failed');
      await this.repo.setStatus(
        v.id,
        'failed',
        `restore from ${job.backupId} failed: ${(e as Error).message}`,
      );
    }
  }
}
