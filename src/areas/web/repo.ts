import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';

export type ExtractStatus = 'queued' | 'running' | 'completed' | 'failed';

interface ExtractJobsTable {
  id: string;
  owner_id: string;
  status: ExtractStatus;
  source: string;
  /** JSON array of the URLs to extract from. */
  urls: string;
  /** JSON array of extracted items once completed, else null. */
  data: string | null;
  item_count: number | null;
  error: string | null;
  created_at: number;
  finished_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    web_extract_jobs: ExtractJobsTable;
  }
}

export type ExtractJobRow = Selectable<ExtractJobsTable>;

export const webMigrations: Record<string, Migration> = {
  '0007-web-extract-jobs': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('web_extract_jobs')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('source', 'text', (c) => c.notNull())
        .addColumn('urls', 'text', (c) => c.notNull())
        .addColumn('data', 'text')
        .addColumn('item_count', 'integer')
        .addColumn('error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('finished_at', 'bigint')
        .execute();
    },
  },
};

export class WebRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: ExtractJobRow): Promise<void> {
    await this.db.insertInto('web_extract_jobs').values(row).execute();
  }

  get(id: string): Promise<ExtractJobRow | undefined> {
    return this.db.selectFrom('web_extract_jobs').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async update(id: string, patch: Partial<Omit<ExtractJobRow, 'id' | 'owner_id'>>): Promise<void> {
    await this.db.updateTable('web_extract_jobs').set(patch).where('id', '=', id).execute();
  }
}
