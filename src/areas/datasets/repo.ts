import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../../store/schema.js';

export interface DatasetsTable {
  id: string;
  owner_id: string;
  name: string;
  description: string | null;
  /** JSON Schema of a row (`type: object` with `properties`), given or inferred from the first rows; null until then. */
  schema: string | null;
  /** Whether `schema` was given (rows are checked against it) or inferred (it only names the columns). */
  schema_given: number;
  /** The database holding the rows (the databases area's; table `rows`, view `items`). */
  database_id: string;
  row_count: number;
  created_at: number;
  updated_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    datasets: DatasetsTable;
  }
}

export const datasetsMigrations: Record<string, Migration> = {
  '0211-datasets': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('datasets')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('description', 'text')
        .addColumn('schema', 'text')
        .addColumn('schema_given', 'integer', (c) => c.notNull())
        .addColumn('database_id', 'text', (c) => c.notNull())
        .addColumn('row_count', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addUniqueConstraint('datasets_owner_name', ['owner_id', 'name'])
        .execute();
    },
  },
};

export class DatasetsRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: DatasetsTable): Promise<void> {
    await this.db.insertInto('datasets').values(row).execute();
  }

  owned(ownerId: string, id: string): Promise<DatasetsTable | undefined> {
    return this.db
      .selectFrom('datasets')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
  }

  byName(ownerId: string, name: string): Promise<DatasetsTable | undefined> {
    return this.db
      .selectFrom('datasets')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('name', '=', name)
      .executeTakeFirst();
  }

  list(ownerId: string): Promise<DatasetsTable[]> {
    return this.db
      .selectFrom('datasets')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .orderBy('id', 'desc')
      .execute();
  }

  async remove(ownerId: string, id: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('datasets')
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  async setSchema(id: string, schema: string): Promise<void> {
    await this.db
      .updateTable('datasets')
      .set({ schema })
      .where('id', '=', id)
      .where('schema', 'is', null)
      .execute();
  }

  async added(id: string, rows: number, at: number): Promise<void> {
    await this.db
      .updateTable('datasets')
      .set({ row_count: sql`row_count + ${rows}`, updated_at: at })
      .where('id', '=', id)
      .execute();
  }
}
