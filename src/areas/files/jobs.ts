import type { JobQueue } from '../../platform/jobs.js';
import { blobKey } from './blobs.js';
import type { FileSearch } from './search.js';
import { JOB_EMBED, JOB_EXPIRE_UPLOAD, JOB_PURGE, type FilesService } from './service.js';
import { purgeAt } from './view.js';

interface FileJob {
  fileId: string;
}

/** An upload still streaming keeps its record this long past the URL's expiry before it is dropped. */
const CLAIMED_UPLOAD_GRACE_MS = 6 * 3600_000;

/**
 * Durable background work of the files area. Every handler is idempotent (jobs run at least once):
 * it re-reads the record and acts only if the state still calls for it.
 */
export function registerFileJobs(jobs: JobQueue, files: FilesService, search: FileSearch): void {
  jobs.register<FileJob>(JOB_PURGE, async ({ fileId }) => {
    const row = await files.repo.byId(fileId);
    if (row?.status !== 'DELETED') return;
    const due = purgeAt(row);
    if (due > files.now()) {
      // Woken early (a clock skew between replicas): sleep again until the retention really ends.
      await jobs.enqueue(
        JOB_PURGE,
        { fileId },
        { runAt: Date.now() + (due - files.now()), key: `${JOB_PURGE}:${fileId}`, onDuplicate: 'replace' },
      );
      return;
    }
    // Record first, guarded on DELETED, so a restore that wins the race keeps its bytes; a crash
    // before the blob delete leaves an orphan object, never a record without bytes.
    if (!(await files.repo.remove(row.id, 'DELETED'))) return;
    await files.stores.at(row.region).delete(blobKey(row.access, row.owner_id, row.id));
    await files.hls?.purge(row.id);
  });

  jobs.register<FileJob>(JOB_EXPIRE_UPLOAD, async ({ fileId }) => {
    const row = await files.repo.byId(fileId);
    if (row?.status !== 'PENDING') return;
    if (row.upload_claimed_at !== null && files.now() - row.upload_claimed_at < CLAIMED_UPLOAD_GRACE_MS) {
      await jobs.enqueue(
        JOB_EXPIRE_UPLOAD,
        { fileId },
        { runAt: Date.now() + 3600_000, key: `${JOB_EXPIRE_UPLOAD}:${fileId}`, onDuplicate: 'replace' },
      );
      return;
    }
    if (!(await files.repo.remove(row.id, 'PENDING'))) return;
    await files.stores.at(row.region).delete(blobKey(row.access, row.owner_id, row.id));
  });

  jobs.register<FileJob>(JOB_EMBED, async ({ fileId }) => search.embedFile(fileId), { maxAttempts: 8 });
}
