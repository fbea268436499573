import { Readable } from 'node:stream';
import type { BlobStores } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { DEFAULT_WORKSPACE } from '../../platform/workspaces.js';
import { assertStorageAvailable } from '../../platform/limits.js';
import type { OutboxEvent } from '../../platform/outbox.js';
import type { PlatformDeps } from '../deps.js';
import { blobKey, type FileUrls } from './blobs.js';
import type { FilesCore } from './core.js';
import type { FileRow, FilesRepo } from './repo.js';
import type { File } from './schemas.js';
import type { EmbeddingsConfig } from './embeddings.js';
import type { FileHls } from './hls.js';
import { FileSearch } from './search.js';
import { FileTransfers, type PlanOf } from './transfers.js';
import { decodeCursor, encodeCursor, purgeAt, toFile } from './view.js';

/** Lifetime of putUrl: long enough for a 5 GB upload on a slow link. */
export const PUT_URL_SECONDS = 3600;
/** Spec: presigned read URLs expire after 1 hour. */
export const READ_URL_SECONDS = 3600;

export const JOB_PURGE = 'files.purge';
export const JOB_EXPIRE_UPLOAD = 'files.expire-upload';
export const JOB_EMBED = 'files.embed';

export interface CreateInput {
  fileName: string;
  contentType: string;
  size: number;
  access: 'public' | 'private';
  region: 'LATAM' | 'US' | 'EU';
  assetId?: string;
  metadata?: Record<string, unknown>;
  /** Resolved by the service (platform/workspaces.ts forCreate). */
  workspaceId?: string;
}

export interface UpdateInput {
  name?: string;
  access?: 'public' | 'private';
  metadata?: Record<string, unknown>;
  status?: 'DONE';
}

function newRow(
  ownerId: string,
  id: string,
  input: CreateInput,
  now: number,
  set: Partial<FileRow>,
): FileRow {
  return {
    id,
    owner_id: ownerId,
    name: input.fileName,
    content_type: input.contentType,
    size: input.size,
    access: input.access,
    status: 'PENDING',
    region: input.region,
    asset_id: input.assetId ?? null,
    metadata: JSON.stringify(input.metadata ?? {}),
    sha256: null,
    upload_nonce: null,
    upload_claimed_at: null,
    embedding: null,
    embedding_hash: null,
    created_at: now,
    updated_at: now,
    deleted_at: null,
    workspace_id: input.workspaceId ?? DEFAULT_WORKSPACE,
    ...set,
  };
}

type FileEvent = 'file.created' | 'file.updated' | 'file.deleted' | 'file.restored';
const fileEvent = (event: FileEvent, ownerId: string, file: File): OutboxEvent => ({
  event,
  ownerId,
  data: file as unknown as Record<string, unknown>,
});

export class FilesService implements FilesCore {
  #now: () => number = Date.now;
  /** Byte routes outside /api/v2 (PUT/GET of presigned URLs, public URLs, share links). */
  readonly transfers: FileTransfers;
  readonly searchIndex: FileSearch;

  constructor(
    readonly repo: FilesRepo,
    readonly stores: BlobStores,
    readonly urls: FileUrls,
    private readonly deps: Pick<PlatformDeps, 'events' | 'jobs' | 'publicUrl' | 'config' | 'outbound' | 'workspaces'>,
    /** The owner's current plan (from the account area). */
    readonly planOf: PlanOf,
    /** The owner's own AI key (from the account area), if set. */
    aiKeyOf: (ownerId: string) => Promise<EmbeddingsConfig | undefined> = async () => undefined,
  ) {
    this.transfers = new FileTransfers(this, planOf);
    // The caller's own AI key first (spec: "using the caller's own AI key"); the operator's
    // NUBE_FILES_AI_KEY, when set, serves accounts that have none.
    const operatorAi = deps.config.files.ai;
    const fallback = operatorAi ? { ...operatorAi, operator: true } : undefined;
    this.searchIndex = new FileSearch(
      this,
      async (ownerId) => (await aiKeyOf(ownerId)) ?? fallback,
      deps.outbound,
    );
  }

  /** HLS renditions of videos (set by the area's wiring). */
  hls?: FileHls;

  now(): number {
    return this.#now();
  }

  async uploaded(fileId: string): Promise<void> {
    await this.hls?.uploaded(fileId);
  }

  /** Tests move time (retention, URL expiry) without sleeping; jobs still run on the real clock. */
  setClock(now: () => number): void {
    this.#now = now;
  }

  view(row: FileRow): File {
    return toFile(row, this.deps.publicUrl(), this.now());
  }

  async create(
    p: Principal,
    input: CreateInput,
  ): Promise<{ file: File; putUrl: string; putUrlExpiresAt: string }> {
    input = { ...input, workspaceId: await this.deps.workspaces.forCreate(p, input.workspaceId) };
    assertStorageAvailable(p.plan, await this.repo.storedBytes(p.ownerId), input.size);
    const now = this.now();
    const id = newId('file');
    const key = blobKey(input.access, p.ownerId, id);
    const { url, nonce } = this.urls.upload(
      input.region,
      key,
      input.size,
      input.contentType,
      PUT_URL_SECONDS,
    );
    const row = newRow(p.ownerId, id, input, now, { status: 'PENDING', upload_nonce: nonce });
    await this.repo.insert(row);
    // An upload that never comes leaves no record behind (and holds no storage allowance).
    await this.deps.jobs.enqueue(
      JOB_EXPIRE_UPLOAD,
      { fileId: id },
      { runAt: Date.now() + (PUT_URL_SECONDS + 60) * 1000, key: `${JOB_EXPIRE_UPLOAD}:${id}` },
    );
    const file = this.view(row);
    return { file, putUrl: url, putUrlExpiresAt: new Date(now + PUT_URL_SECONDS * 1000).toISOString() };
  }

  async list(
    p: Principal,
    q: { limit: number; cursor?: string; assetId?: string; status: 'DONE' | 'DELETED'; workspaceId?: string },
  ) {
    const workspaces = await this.deps.workspaces.filter(p, q.workspaceId);
    let beforeId: string | undefined;
    if (q.cursor !== undefined) {
      beforeId = decodeCursor(q.cursor);
      if (!beforeId)
        throw errors.badRequest(
          'invalid cursor',
          [{ path: ['cursor'], message: 'not a cursor from this API' }],
          'InvalidCursor',
        );
    }
    const rows = await this.repo.page({
      ownerId: p.ownerId,
      status: q.status,
      assetId: q.assetId,
      beforeId,
      limit: q.limit + 1,
      workspaces,
    });
    const hasMore = rows.length > q.limit;
    const items = rows.slice(0, q.limit);
    return {
      items: items.map((r) => this.view(r)),
      hasMore,
      nextCursor: hasMore ? encodeCursor(items[items.length - 1]!.id) : null,
    };
  }

  /** The owner's visible record; another owner's file, a PENDING upload or a missing one is a 404. */
  async row(p: Principal, id: string): Promise<FileRow> {
    const row = await this.repo.owned(p.ownerId, id);
    if (!row || !this.deps.workspaces.sees(p, row.workspace_id)) throw errors.notFound('file');
    return row;
  }

  async doneRow(p: Principal, id: string): Promise<FileRow> {
    const row = await this.row(p, id);
    if (row.status !== 'DONE')
      throw errors.conflict('the file is in the trash; restore it first', 'FileDeleted');
    return row;
  }

  async get(p: Principal, id: string): Promise<File> {
    const row = await this.row(p, id);
    const file = this.view(row);
    // The trash is not readable: a deleted file gets its bytes back with restore.
    if (row.status === 'DONE') {
      file.readUrl = this.urls.read(row.region, blobKey(row.access, row.owner_id, row.id), READ_URL_SECONDS);
      file.readUrlExpiresAt = new Date(this.now() + READ_URL_SECONDS * 1000).toISOString();
    }
    return file;
  }

  async update(p: Principal, id: string, input: UpdateInput): Promise<File> {
    let row = await this.row(p, id);
    if (input.status === 'DONE' && row.status === 'DELETED') row = await this.restoreRow(row);
    if (row.status !== 'DONE')
      throw errors.conflict('the file is in the trash; restore it first (status DONE)', 'FileDeleted');
    const set: Partial<FileRow> = {};
    if (input.name !== undefined && input.name !== row.name) set.name = input.name;
    if (input.metadata !== undefined) set.metadata = JSON.stringify(input.metadata);
    const moving = input.access !== undefined && input.access !== row.access;
    if (moving) set.access = input.access;
    if (Object.keys(set).length === 0) return this.view(row);

    const store = this.stores.at(row.region);
    const oldKey = blobKey(row.access, row.owner_id, row.id);
    const newKey = moving ? blobKey(input.access as string, row.owner_id, row.id) : oldKey;
    // Copy first, switch the record, then delete: a crash in between leaves an orphan copy, never a
    // record pointing at nothing.
    if (moving) await store.copy(oldKey, newKey);
    set.updated_at = this.now();
    const updated = { ...row, ...set } as FileRow;
    const file = this.view(updated);
    const changed = await this.deps.events.atomically(async (trx, emit) => {
      const ok = await this.repo.update(row.id, 'DONE', set, trx);
      if (ok) emit(fileEvent('file.updated', p.ownerId, file));
      return ok;
    });
    if (!changed) {
      if (moving) await store.delete(newKey);
      throw errors.conflict('the file changed meanwhile; try again', 'FileChanged');
    }
    if (moving) await store.delete(oldKey);
    if (set.name !== undefined || set.metadata !== undefined) await this.enqueueEmbed(row.id);
    return file;
  }

  async delete(p: Principal, id: string): Promise<void> {
    const row = await this.row(p, id);
    if (row.status === 'DELETED') return;
    const now = this.now();
    const deleted = { ...row, status: 'DELETED', deleted_at: now, updated_at: now };
    await this.deps.events.atomically(async (trx, emit) => {
      if (
        !(await this.repo.update(
          row.id,
          'DONE',
          { status: 'DELETED', deleted_at: now, updated_at: now },
          trx,
        ))
      )
        return;
      const purge = {
        runAt: purgeAt(deleted),
        key: `${JOB_PURGE}:${row.id}`,
        onDuplicate: 'replace' as const,
        db: trx,
      };
      await this.deps.jobs.enqueue(JOB_PURGE, { fileId: row.id }, purge);
      emit(fileEvent('file.deleted', p.ownerId, this.view(deleted)));
    });
  }

  async restore(p: Principal, id: string): Promise<File> {
    const row = await this.row(p, id);
    if (row.status === 'DONE') return this.view(row);
    return this.view(await this.restoreRow(row));
  }

  private async restoreRow(row: FileRow): Promise<FileRow> {
    if (purgeAt(row) <= this.now()) {
      throw errors.conflict(
        'the file was in the trash longer than 7 days and is being purged',
        'RetentionExpired',
      );
    }
    const now = this.now();
    const restored = { ...row, status: 'DONE', deleted_at: null, updated_at: now };
    const ok = await this.deps.events.atomically(async (trx, emit) => {
      const won = await this.repo.update(
        row.id,
        'DELETED',
        { status: 'DONE', deleted_at: null, updated_at: now },
        trx,
      );
      if (won) emit(fileEvent('file.restored', row.owner_id, this.view(restored)));
      return won;
    });
    if (!ok) throw errors.conflict('the file changed meanwhile; try again', 'FileChanged');
    // A purge that still runs finds the record DONE and leaves it (repo.remove is guarded by status).
    await this.deps.jobs.cancel({ key: `${JOB_PURGE}:${row.id}` });
    return restored;
  }

  async duplicate(p: Principal, id: string, name?: string): Promise<File> {
    const row = await this.doneRow(p, id);
    assertStorageAvailable(p.plan, await this.repo.storedBytes(p.ownerId), row.size);
    const now = this.now();
    const copy: FileRow = {
      ...row,
      id: newId('file'),
      name: name ?? `${row.name} (copy)`,
      embedding: null,
      embedding_hash: null,
      created_at: now,
      updated_at: now,
    };
    const store = this.stores.at(row.region);
    await store.copy(blobKey(row.access, row.owner_id, row.id), blobKey(copy.access, copy.owner_id, copy.id));
    const file = this.view(copy);
    await this.insertReported(copy, file);
    await this.enqueueEmbed(copy.id);
    return file;
  }

  /**
   * A new DONE file from bytes nube produced itself (image transformations): quota checked before the
   * write, the record inserted only once the object is stored.
   */
  async createFromBytes(p: Principal, input: Omit<CreateInput, 'size'> & { data: Buffer }): Promise<File> {
    input = { ...input, workspaceId: await this.deps.workspaces.forCreate(p, input.workspaceId) };
    assertStorageAvailable(p.plan, await this.repo.storedBytes(p.ownerId), input.data.byteLength);
    const now = this.now();
    const id = newId('file');
    const put = await this.stores
      .at(input.region)
      .put(blobKey(input.access, p.ownerId, id), Readable.from([input.data]), {
        contentType: input.contentType,
        expectedSize: input.data.byteLength,
      });
    const row = newRow(p.ownerId, id, { ...input, size: put.size }, now, {
      status: 'DONE',
      sha256: put.sha256,
    });
    const file = this.view(row);
    await this.insertReported(row, file);
    await this.enqueueEmbed(id);
    return file;
  }

  /** The bytes of one of the owner's DONE files. The caller consumes or destroys the stream. */
  async open(p: Principal, id: string): Promise<{ row: FileRow; stream: Readable }> {
    const row = await this.doneRow(p, id);
    const got = await this.stores.at(row.region).get(blobKey(row.access, row.owner_id, row.id));
    return { row, stream: got.stream };
  }

  /** A new DONE record and its `file.created`, committed together. */
  private insertReported(row: FileRow, file: File): Promise<void> {
    return this.deps.events.atomically(async (trx, emit) => {
      await this.repo.insert(row, trx);
      emit(fileEvent('file.created', row.owner_id, file));
    });
  }

  /** PENDING -> DONE with its `file.created`, committed together; false if the record went meanwhile. */
  completeUpload(row: FileRow, sha256: string, file: File): Promise<boolean> {
    return this.deps.events.atomically(async (trx, emit) => {
      const ok = await this.repo.completeUpload(row.id, sha256, this.now(), trx);
      if (ok) emit(fileEvent('file.created', row.owner_id, file));
      return ok;
    });
  }

  async enqueueEmbed(fileId: string): Promise<void> {
    if (!this.deps.config.files.ai) return;
    await this.deps.jobs.enqueue(
      JOB_EMBED,
      { fileId },
      { key: `${JOB_EMBED}:${fileId}`, onDuplicate: 'replace' },
    );
  }
}
