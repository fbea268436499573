import type { ColumnType, Insertable, Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

/** One row per user database; the data itself lives in the engine's `<id>.sqlite` file. */
interface DatabasesTable {
  id: string;
  owner_id: string;
  name: string;
  description: string | null;
  created_at: number;
  /** The node whose disk holds the file (placement.ts); null on rows made before nodes existed. */
  node_id: string | null;
  /** Bytes of file plus WAL as its holder last copied it (copies.ts): what other nodes report. */
  size_bytes: ColumnType<number, number | undefined, number>;
  /** Blob key of the latest copy (copies.ts), null until the first. */
  copy_key: ColumnType<string | null, string | null | undefined, string | null>;
  /** When the latest copy's snapshot began (ms): writes acknowledged before it are in the copy. */
  copy_at: ColumnType<number | null, number | null | undefined, number | null>;
  /** The node restoring or moving the database (mover.ts) and until when that lease holds. */
  claim_node: ColumnType<string | null, string | null | undefined, string | null>;
  claim_until: ColumnType<number | null, number | null | undefined, number | null>;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: ColumnType<string, string | undefined, string>;
}

declare module '../../store/schema.js' {
  interface Tables {
    databases: DatabasesTable;
  }
}

export type DatabaseRow = Selectable<DatabasesTable>;
export type NewDatabaseRow = Insertable<DatabasesTable>;

export const databasesMigrations: Record<string, Migration> = {
  '0006-databases-databases': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('databases')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('description', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        // The 409 on a duplicate name is enforced here, so two concurrent creates cannot both win.
        .addUniqueConstraint('databases_owner_name', ['owner_id', 'name'])
        .execute();
    },
  },
};

export class DatabasesRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  list(ownerId: string, workspaces?: readonly string[]): Promise<DatabaseRow[]> {
    let q = this.db.selectFrom('databases').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return q.orderBy('id').execute();
  }

  /** Bytes per workspace as their holders last copied them (size_bytes): cheap, not to the byte. */
  async bytesByWorkspace(ownerId: string): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom('databases')
      .select((eb) => ['workspace_id', eb.fn.sum<number>('size_bytes').as('n')])
      .where('owner_id', '=', ownerId)
      .groupBy('workspace_id')
      .execute();
    return new Map(rows.map((r) => [r.workspace_id, Number(r.n ?? 0)]));
  }

  get(ownerId: string, id: string): Promise<DatabaseRow | undefined> {
    return this.db
      .selectFrom('databases')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('id', '=', id)
      .executeTakeFirst();
  }

  async count(ownerId: string): Promise<number> {
    const row = await this.db
      .selectFrom('databases')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** Writes take an optional transaction: the service commits a change with its event (outbox). */
  async insert(row: NewDatabaseRow, db: Kysely<Tables> = this.db): Promise<void> {
    await db.insertInto('databases').values(row).execute();
  }

  async delete(ownerId: string, id: string, db: Kysely<Tables> = this.db): Promise<boolean> {
    const r = await db
      .deleteFrom('databases')
      .where('owner_id', '=', ownerId)
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }
}

export const databaseWorkspaceMigrations: Record<string, Migration> = {
  '0272-databases-workspace': workspaceColumnMigration('databases', 'owner_id'),
};
