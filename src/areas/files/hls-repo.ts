// A file's HLS renditions (issue 34 item 5): one row per file that was asked to stream, its state and
// what the renditions weigh (counted in the owner's storage with the files).
import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { addUsage } from './repo.js';

export type HlsStatus = 'requested' | 'processing' | 'ready' | 'failed';

interface FileHlsTable {
  file_id: string;
  owner_id: string;
  /** requested: asked for at upload, starts when the bytes arrive. */
  status: HlsStatus;
  /** 0..1 while processing. */
  progress: number;
  error: string | null;
  /** Bytes of the playlists and segments (in the owner's storage once ready). */
  bytes: number | string;
  /** JSON [{ name, width, height, bandwidth }]. */
  renditions: string;
  /** The blob location the renditions are in (the file's region when they were made). */
  region: string;
  updated_at: number | string;
}

declare module '../../store/schema.js' {
  interface Tables {
    file_hls: FileHlsTable;
  }
}

export type HlsRow = Selectable<FileHlsTable>;

export const hlsMigrations: Record<string, Migration> = {
  '0201-files-hls': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('file_hls')
        .addColumn('file_id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('progress', 'real', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('bytes', 'bigint', (c) => c.notNull())
        .addColumn('renditions', 'text', (c) => c.notNull())
        .addColumn('region', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};

export class HlsRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  get(fileId: string): Promise<HlsRow | undefined> {
    return this.db.selectFrom('file_hls').selectAll().where('file_id', '=', fileId).executeTakeFirst();
  }

  /** A new request (or a failed one asked again); false when one is requested, processing or ready already. */
  async request(
    fileId: string,
    ownerId: string,
    region: string,
    status: 'requested' | 'processing',
  ): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const cur = await trx
        .selectFrom('file_hls')
        .select('status')
        .where('file_id', '=', fileId)
        .executeTakeFirst();
      if (cur && cur.status !== 'failed') return false;
      const row = {
        file_id: fileId,
        owner_id: ownerId,
        status,
        progress: 0,
        error: null,
        bytes: 0,
        renditions: '[]',
        region,
        updated_at: Date.now(),
      };
      if (cur) await trx.updateTable('file_hls').set(row).where('file_id', '=', fileId).execute();
      else await trx.insertInto('file_hls').values(row).execute();
      return true;
    });
  }

  /** requested -> processing (the upload arrived); false when there was no request. */
  async start(fileId: string): Promise<boolean> {
    const r = await this.db
      .updateTable('file_hls')
      .set({ status: 'processing', updated_at: Date.now() })
      .where('file_id', '=', fileId)
      .where('status', '=', 'requested')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async progress(fileId: string, progress: number): Promise<void> {
    await this.db
      .updateTable('file_hls')
      .set({ progress, updated_at: Date.now() })
      .where('file_id', '=', fileId)
      .where('status', '=', 'processing')
      .execute();
  }

  async fail(fileId: string, error: string): Promise<void> {
    await this.db
      .updateTable('file_hls')
      .set({ status: 'failed', error, updated_at: Date.now() })
      .where('file_id', '=', fileId)
      .where('status', '=', 'processing')
      .execute();
  }

  /** Ready, its bytes counted in the owner's storage in the same commit; false when it was removed meanwhile. */
  async ready(
    row: Pick<HlsRow, 'file_id' | 'owner_id'>,
    bytes: number,
    renditions: unknown[],
  ): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .updateTable('file_hls')
        .set({
          status: 'ready',
          progress: 1,
          error: null,
          bytes,
          renditions: JSON.stringify(renditions),
          updated_at: Date.now(),
        })
        .where('file_id', '=', row.file_id)
        .where('status', '=', 'processing')
        .executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await addUsage(trx, row.owner_id, bytes);
      return true;
    });
  }

  /** Removes the row (its bytes leave the owner's storage); the caller deletes the objects. */
  async remove(fileId: string): Promise<HlsRow | undefined> {
    return this.db.transaction().execute(async (trx) => {
      const row = await trx
        .selectFrom('file_hls')
        .selectAll()
        .where('file_id', '=', fileId)
        .executeTakeFirst();
      if (!row) return undefined;
      await trx.deleteFrom('file_hls').where('file_id', '=', fileId).execute();
      if (row.status === 'ready') await addUsage(trx, row.owner_id, -Number(row.bytes));
      return row;
    });
  }
}
