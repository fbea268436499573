import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';

/** Database tokens: a credential for SQL on one database (libSQL authToken, /query). Only the hash is kept. */
interface DatabaseTokensTable {
  id: string;
  owner_id: string;
  database_id: string;
  /** SHA-256 hex of the token; the token itself is shown once. */
  hash: string;
  preview: string;
  name: string | null;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    database_tokens: DatabaseTokensTable;
  }
}

export type DatabaseTokenRow = Selectable<DatabaseTokensTable>;

export const databaseTokensMigrations: Record<string, Migration> = {
  '0013-databases-tokens': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('database_tokens')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('database_id', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull().unique())
        .addColumn('preview', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('database_tokens_db')
        .on('database_tokens')
        .columns(['owner_id', 'database_id', 'id'])
        .execute();
    },
  },
};

export class DatabaseTokensRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: DatabaseTokenRow): Promise<void> {
    await this.db.insertInto('database_tokens').values(row).execute();
  }

  list(ownerId: string, databaseId: string): Promise<DatabaseTokenRow[]> {
    return this.db
      .selectFrom('database_tokens')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('database_id', '=', databaseId)
      .orderBy('id')
      .execute();
  }

  byHash(hash: string): Promise<DatabaseTokenRow | undefined> {
    return this.db.selectFrom('database_tokens').selectAll().where('hash', '=', hash).executeTakeFirst();
  }

  async delete(ownerId: string, databaseId: string, id: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('database_tokens')
      .where('owner_id', '=', ownerId)
      .where('database_id', '=', databaseId)
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /** Every token of a database (it is being deleted); `db` may be the delete's transaction. */
  async deleteAll(ownerId: string, databaseId: string, db: Kysely<Tables> = this.db): Promise<void> {
    await db
      .deleteFrom('database_tokens')
      .where('owner_id', '=', ownerId)
      .where('database_id', '=', databaseId)
      .execute();
  }
}
