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
  /** Dataset the rows go to, or null. */
  dataset_id: string | null;
  /** Items the job keeps at most (`limit`), or null. */
  item_limit: number | null;
  /** JSON: what the append to the dataset did (rows added, rejected), once completed. */
  dataset_result: string | null;
  /** JSON: the source's options (`schema`: the JSON Schema and prompt), or null. */
  options: string | null;
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
  '0212-web-extract-datasets': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('web_extract_jobs').addColumn('dataset_id', 'text').execute();
      await db.schema.alterTable('web_extract_jobs').addColumn('item_limit', 'integer').execute();
      await db.schema.alterTable('web_extract_jobs').addColumn('dataset_result', 'text').execute();
      await db.schema.alterTable('web_extract_jobs').addColumn('options', 'text').execute();
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
