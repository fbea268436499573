// The index of a database's history in the blob store (docs/decisions.md, "Databases: history"):
// generations (a snapshot of the file, taken now and then) and the WAL segments shipped after each, in
// order; and bookmarks, points in time a caller named. The bytes live in the blob store; these rows say
// which objects make up which point, so a restore never lists the store.
import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../../store/schema.js';

interface GenerationsTable {
  id: string;
  database_id: string;
  /** Blob key of the snapshot (gzip of the raw database file). */
  snapshot_key: string;
  page_size: number;
  /** When the generation's first segment was read: its first restorable point. */
  started_at: number;
  snapshot_bytes: number;
  /**
   * A generation begun by a restore starts from another one's state (that generation up to its
   * segment `base_seq`) instead of a snapshot of its own: the restore uploads nothing but a marker.
   */
  base_generation_id: string | null;
  base_seq: number | null;
}

interface SegmentsTable {
  key: string;
  database_id: string;
  generation_id: string;
  /** Order within the generation (0: the WAL as found when the snapshot was taken). */
  seq: number;
  /** Which WAL of the generation (SQLite restarts the WAL after a full checkpoint) and where in it. */
  wal_index: number;
  offset_start: number;
  offset_end: number;
  /** When the WAL was read: every write acknowledged before is in this segment or an earlier one. */
  at: number;
  /** Compressed bytes in the store. */
  bytes: number;
}

interface BookmarksTable {
  id: string;
  database_id: string;
  owner_id: string;
  name: string | null;
  at: number;
  created_at: number;
}

declare module '../../../store/schema.js' {
  interface Tables {
    database_generations: GenerationsTable;
    database_segments: SegmentsTable;
    database_bookmarks: BookmarksTable;
  }
}

export type GenerationRow = Selectable<GenerationsTable>;
export type SegmentRow = Selectable<SegmentsTable>;
export type BookmarkRow = Selectable<BookmarksTable>;

export const databaseHistoryMigrations: Record<string, Migration> = {
  '0280-databases-history': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('database_generations')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('database_id', 'text', (c) => c.notNull())
        .addColumn('snapshot_key', 'text', (c) => c.notNull())
        .addColumn('page_size', 'integer', (c) => c.notNull())
        .addColumn('started_at', 'bigint', (c) => c.notNull())
        .addColumn('snapshot_bytes', 'bigint', (c) => c.notNull())
        .addColumn('base_generation_id', 'text')
        .addColumn('base_seq', 'integer')
        .execute();
      await db.schema.createIndex('database_generations_db').on('database_generations').columns(['database_id', 'started_at']).execute();
      await db.schema
        .createTable('database_segments')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('database_id', 'text', (c) => c.notNull())
        .addColumn('generation_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('wal_index', 'integer', (c) => c.notNull())
        .addColumn('offset_start', 'bigint', (c) => c.notNull())
        .addColumn('offset_end', 'bigint', (c) => c.notNull())
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('bytes', 'bigint', (c) => c.notNull())
        .addUniqueConstraint('database_segments_order', ['generation_id', 'seq'])
        .execute();
      await db.schema.createIndex('database_segments_db').on('database_segments').columns(['database_id', 'at']).execute();
      await db.schema
        .createTable('database_bookmarks')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('database_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('database_bookmarks_db').on('database_bookmarks').column('database_id').execute();
    },
  },
};

const num = <T extends Record<string, unknown>>(r: T, keys: (keyof T)[]): T => {
  const o = { ...r };
  for (const k of keys) (o as Record<string, unknown>)[k as string] = Number(r[k]);
  return o;
};

function genRow(r: GenerationRow): GenerationRow {
  const o = num(r, ['page_size', 'started_at', 'snapshot_bytes']);
  return { ...o, base_seq: r.base_seq === null ? null : Number(r.base_seq) };
}

export class HistoryRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async generations(dbId: string): Promise<GenerationRow[]> {
    const rows = await this.db.selectFrom('database_generations').selectAll().where('database_id', '=', dbId).orderBy('started_at').execute();
    return rows.map(genRow);
  }

  async segments(generationId: string): Promise<SegmentRow[]> {
    const rows = await this.db.selectFrom('database_segments').selectAll().where('generation_id', '=', generationId).orderBy('seq').execute();
    return rows.map((r) => num(r, ['seq', 'wal_index', 'offset_start', 'offset_end', 'at', 'bytes']));
  }

  async segmentByKey(key: string): Promise<SegmentRow | undefined> {
    const r = await this.db.selectFrom('database_segments').selectAll().where('key', '=', key).executeTakeFirst();
    return r && num(r, ['seq', 'wal_index', 'offset_start', 'offset_end', 'at', 'bytes']);
  }

  async generation(id: string): Promise<GenerationRow | undefined> {
    const r = await this.db.selectFrom('database_generations').selectAll().where('id', '=', id).executeTakeFirst();
    return r && genRow(r);
  }

  async bookmarks(dbId: string): Promise<BookmarkRow[]> {
    const rows = await this.db.selectFrom('database_bookmarks').selectAll().where('database_id', '=', dbId).orderBy('at').execute();
    return rows.map((r) => num(r, ['at', 'created_at']));
  }

  async bookmark(dbId: string, id: string): Promise<BookmarkRow | undefined> {
    const r = await this.db.selectFrom('database_bookmarks').selectAll().where('database_id', '=', dbId).where('id', '=', id).executeTakeFirst();
    return r && num(r, ['at', 'created_at']);
  }

  async addBookmark(row: BookmarkRow): Promise<void> {
    await this.db.insertInto('database_bookmarks').values(row).execute();
  }

  /** Every object key of a database's history (for deleting it). */
  async keys(dbId: string): Promise<string[]> {
    const [g, s] = await Promise.all([
      this.db.selectFrom('database_generations').select('snapshot_key as key').where('database_id', '=', dbId).execute(),
      this.db.selectFrom('database_segments').select('key').where('database_id', '=', dbId).execute(),
    ]);
    return [...new Set([...g, ...s].map((r) => r.key))];
  }

  async removeAll(dbId: string): Promise<void> {
    await this.db.deleteFrom('database_segments').where('database_id', '=', dbId).execute();
    await this.db.deleteFrom('database_generations').where('database_id', '=', dbId).execute();
    await this.db.deleteFrom('database_bookmarks').where('database_id', '=', dbId).execute();
  }

  /** Removes a generation's rows (its objects are deleted by the caller first). */
  async removeGeneration(id: string): Promise<void> {
    await this.db.deleteFrom('database_segments').where('generation_id', '=', id).execute();
    await this.db.deleteFrom('database_generations').where('id', '=', id).execute();
  }
}
