import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

interface WorkspacesTable {
  id: string;
  account_id: string;
  name: string;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    workspaces: WorkspacesTable;
  }
}

// The default workspace has no row: it is `default` in every account (DEFAULT_WORKSPACE), so accounts
// made before workspaces need no backfill. Rows here are the workspaces an owner created.
export const workspacesMigrations: Record<string, Migration> = {
  '0270-workspaces': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('workspaces')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('account_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('workspaces_account_name').unique().on('workspaces').columns(['account_id', 'name']).execute();
    },
  },
};

export interface WorkspaceRow {
  id: string;
  accountId: string;
  name: string;
  createdAt: number;
}

const row = (r: WorkspacesTable): WorkspaceRow => ({ id: r.id, accountId: r.account_id, name: r.name, createdAt: Number(r.created_at) });

export class WorkspacesRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  get(accountId: string, id: string): Promise<WorkspaceRow | undefined> {
    return this.db
      .selectFrom('workspaces')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('id', '=', id)
      .executeTakeFirst()
      .then((r) => r && row(r));
  }

  async list(accountId: string): Promise<WorkspaceRow[]> {
    return (await this.db.selectFrom('workspaces').selectAll().where('account_id', '=', accountId).orderBy('id').execute()).map(row);
  }

  async insert(trx: Kysely<Tables>, w: WorkspaceRow): Promise<void> {
    await trx.insertInto('workspaces').values({ id: w.id, account_id: w.accountId, name: w.name, created_at: w.createdAt }).execute();
  }

  async rename(accountId: string, id: string, name: string): Promise<boolean> {
    const r = await this.db.updateTable('workspaces').set({ name }).where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async delete(trx: Kysely<Tables>, accountId: string, id: string): Promise<boolean> {
    const r = await trx.deleteFrom('workspaces').where('account_id', '=', accountId).where('id', '=', id).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }
}
