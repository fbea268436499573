import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

/**
 * `PENDING` is internal: the record exists from POST /files until its bytes arrive. The API never shows
 * it (the File schema only knows DONE/DELETED), so every read filters it out.
 */
export type FileRowStatus = 'PENDING' | 'DONE' | 'DELETED';

export interface FilesTable {
  id: string;
  owner_id: string;
  name: string;
  content_type: string;
  size: number;
  access: string;
  status: string;
  region: string;
  asset_id: string | null;
  metadata: string;
  sha256: string | null;
  /** Nonce of the one PUT URL issued for this record. */
  upload_nonce: string | null;
  /** Set while a PUT holds the upload (atomic claim); cleared if that PUT fails. */
  upload_claimed_at: number | null;
  /** Embedding vector as JSON text, and a hash of the text + model it was computed from. */
  embedding: string | null;
  embedding_hash: string | null;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

/** Bytes each owner stores (DONE and DELETED files), kept with every change so the allowance check is one row. */
export interface FilesUsageTable {
  owner_id: string;
  bytes: number | string;
}

declare module '../../store/schema.js' {
  interface Tables {
    files: FilesTable;
    files_usage: FilesUsageTable;
  }
}

/** Statuses whose bytes count against the owner's storage (the trash counts until purged). */
const COUNTED: readonly FileRowStatus[] = ['DONE', 'DELETED'];

export const filesMigrations: Record<string, Migration> = {
  '0004-files-files': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('files')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('content_type', 'text', (c) => c.notNull())
        .addColumn('size', 'bigint', (c) => c.notNull())
        .addColumn('access', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('region', 'text', (c) => c.notNull())
        .addColumn('asset_id', 'text')
        .addColumn('metadata', 'text', (c) => c.notNull())
        .addColumn('sha256', 'text')
        .addColumn('upload_nonce', 'text')
        .addColumn('upload_claimed_at', 'bigint')
        .addColumn('embedding', 'text')
        .addColumn('embedding_hash', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('deleted_at', 'bigint')
        .execute();
      // Listing is "owner's files in one status, newest id first"; the id is time-ordered.
      await db.schema
        .createIndex('files_owner_status_id')
        .on('files')
        .columns(['owner_id', 'status', 'id'])
        .execute();
    },
  },
  // Summing an owner's files for every upload grew with their count (19 ms at 90,000 files, twice per
  // upload, on the event loop): the total is kept instead, from what the files hold now.
  '0170-files-usage': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('files_usage')
        .addColumn('owner_id', 'text', (c) => c.primaryKey())
        .addColumn('bytes', 'bigint', (c) => c.notNull())
        .execute();
      await sql`insert into files_usage (owner_id, bytes) select owner_id, sum(size) from files where status in ('DONE', 'DELETED') group by owner_id`.execute(
        db,
      );
    },
  },
};

export type FileRow = Omit<
  FilesTable,
  'size' | 'upload_claimed_at' | 'created_at' | 'updated_at' | 'deleted_at'
> & {
  size: number;
  upload_claimed_at: number | null;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
};

// PostgreSQL returns bigint columns as strings.
function norm(r: FilesTable): FileRow {
  return {
    ...r,
    size: Number(r.size),
    upload_claimed_at: r.upload_claimed_at === null ? null : Number(r.upload_claimed_at),
    created_at: Number(r.created_at),
    updated_at: Number(r.updated_at),
    deleted_at: r.deleted_at === null ? null : Number(r.deleted_at),
  };
}

// Writes take an optional transaction: the service commits a change together with its event (outbox).
export class FilesRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: FilesTable, db: Kysely<Tables> = this.db): Promise<void> {
    await db.insertInto('files').values(row).execute();
    if (COUNTED.includes(row.status as FileRowStatus)) await addUsage(db, row.owner_id, Number(row.size));
  }

  /** Any status, any owner: for routes that resolve a file from a signed token or a job. */
  async byId(id: string): Promise<FileRow | undefined> {
    const r = await this.db.selectFrom('files').selectAll().where('id', '=', id).executeTakeFirst();
    return r && norm(r);
  }

  /** The owner's visible file (DONE or DELETED); a PENDING or foreign record is absent. */
  async owned(ownerId: string, id: string): Promise<FileRow | undefined> {
    const r = await this.db
      .selectFrom('files')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('status', 'in', ['DONE', 'DELETED'])
      .executeTakeFirst();
    return r && norm(r);
  }

  async page(q: {
    ownerId: string;
    status: 'DONE' | 'DELETED';
    assetId?: string;
    beforeId?: string;
    limit: number;
    workspaces?: readonly string[];
  }): Promise<FileRow[]> {
    let s = this.db
      .selectFrom('files')
      .selectAll()
      .where('owner_id', '=', q.ownerId)
      .where('status', '=', q.status);
    if (q.assetId !== undefined) s = s.where('asset_id', '=', q.assetId);
    if (q.workspaces) s = s.where('workspace_id', 'in', q.workspaces);
    if (q.beforeId !== undefined) s = s.where('id', '<', q.beforeId);
    const rows = await s.orderBy('id', 'desc').limit(q.limit).execute();
    return rows.map(norm);
  }

  /** Stored bytes per workspace (DONE and the trash, as the allowance counts them). */
  async bytesByWorkspace(ownerId: string): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom('files')
      .select((eb) => ['workspace_id', eb.fn.sum<number>('size').as('n')])
      .where('owner_id', '=', ownerId)
      .where('status', 'in', ['DONE', 'DELETED'])
      .groupBy('workspace_id')
      .execute();
    return new Map(rows.map((r) => [r.workspace_id, Number(r.n ?? 0)]));
  }

  async allDone(ownerId: string): Promise<FileRow[]> {
    const rows = await this.db
      .selectFrom('files')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('status', '=', 'DONE')
      .execute();
    return rows.map(norm);
  }

  /** Bytes the owner holds: DONE and DELETED files (the trash counts until purged). */
  async storedBytes(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('files_usage')
      .select('bytes')
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r?.bytes ?? 0);
  }

  /** Bytes and objects stored (live and in the trash) per region, over every owner (GET /metrics). */
  async storedByRegion(): Promise<{ region: string; bytes: number; files: number }[]> {
    const rows = await this.db
      .selectFrom('files')
      .select((eb) => [
        'region',
        eb.fn.sum<string | number | null>('size').as('bytes'),
        eb.fn.countAll<number>().as('files'),
      ])
      .where('status', 'in', ['DONE', 'DELETED'])
      .groupBy('region')
      .execute();
    return rows.map((r) => ({ region: r.region, bytes: Number(r.bytes ?? 0), files: Number(r.files) }));
  }

  /** Atomic single use of a PUT URL: true for exactly one caller per nonce while the file is PENDING. */
  async claimUpload(id: string, nonce: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('files')
      .set({ upload_claimed_at: now })
      .where('id', '=', id)
      .where('status', '=', 'PENDING')
      .where('upload_nonce', '=', nonce)
      .where('upload_claimed_at', 'is', null)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async releaseUpload(id: string): Promise<void> {
    await this.db
      .updateTable('files')
      .set({ upload_claimed_at: null })
      .where('id', '=', id)
      .where('status', '=', 'PENDING')
      .execute();
  }

  /** PENDING -> DONE; false if the record changed meanwhile (expired and removed). Pass the transaction. */
  async completeUpload(
    id: string,
    sha256: string,
    now: number,
    db: Kysely<Tables> = this.db,
  ): Promise<boolean> {
    return this.update(id, 'PENDING', { status: 'DONE', sha256, upload_nonce: null, updated_at: now }, db);
  }

  /**
   * Guarded update: applies only while the row is still in `fromStatus`. A change of status that
   * starts or stops counting the bytes moves the owner's total in the same statement's transaction
   * (pass one: `db` is used as it is).
   */
  async update(
    id: string,
    fromStatus: FileRowStatus,
    set: Partial<FilesTable>,
    db: Kysely<Tables> = this.db,
  ): Promise<boolean> {
    const moves =
      set.status !== undefined &&
      COUNTED.includes(set.status as FileRowStatus) !== COUNTED.includes(fromStatus);
    const apply = async (trx: Kysely<Tables>) => {
      const r = await trx
        .updateTable('files')
        .set(set)
        .where('id', '=', id)
        .where('status', '=', fromStatus)
        .returning(['owner_id', 'size'])
        .execute();
      const row = r[0];
      if (row && moves)
        await addUsage(
          trx,
          row.owner_id,
          COUNTED.includes(fromStatus) ? -Number(row.size) : Number(row.size),
        );
      return r.length === 1;
    };
    return moves && db === this.db ? this.db.transaction().execute(apply) : apply(db);
  }

  async setEmbedding(id: string, embedding: number[], hash: string): Promise<void> {
    await this.db
      .updateTable('files')
      .set({ embedding: JSON.stringify(embedding), embedding_hash: hash })
      .where('id', '=', id)
      .execute();
  }

  /** Deletes the record if it is still in `status` (a purge must not race a restore). */
  async remove(id: string, status: FileRowStatus): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .deleteFrom('files')
        .where('id', '=', id)
        .where('status', '=', status)
        .returning(['owner_id', 'size'])
        .execute();
      const row = r[0];
      if (row && COUNTED.includes(status)) await addUsage(trx, row.owner_id, -Number(row.size));
      return r.length === 1;
    });
  }
}

/** Adds `bytes` (negative: frees them) to what the owner stores, in the caller's transaction. */
export async function addUsage(db: Kysely<Tables>, ownerId: string, bytes: number): Promise<void> {
  await db
    .insertInto('files_usage')
    .values({ owner_id: ownerId, bytes })
    .onConflict((oc) => oc.column('owner_id').doUpdateSet({ bytes: sql`files_usage.bytes + excluded.bytes` }))
    .execute();
}

export const fileWorkspaceMigrations: Record<string, Migration> = {
  '0273-files-workspace': workspaceColumnMigration('files', 'owner_id'),
};
