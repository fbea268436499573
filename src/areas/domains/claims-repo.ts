import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

// Custom domains, whatever they point at (a sandbox port, a machine, a site): one row per (domain,
// owner). Several owners may claim a domain; only one can have it verified, and only a verified row
// routes traffic or gets a certificate. Sandboxes, machines and sites reach this table only through
// the domains area's facade.

export type TargetKind = 'sandbox' | 'machine' | 'site' | 'none';

interface DomainsTable {
  domain: string;
  owner_id: string;
  /** What the domain serves; 'none' until it is attached. */
  target_kind: TargetKind;
  target_id: string | null;
  /** The sandbox port (sandbox targets); machines route to their app's port, sites need none. */
  port: number | null;
  /** Value of the TXT record that proves ownership. */
  token: string;
  verified_at: number | null;
  created_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

declare module '../../store/schema.js' {
  interface Tables {
    domains: DomainsTable;
  }
}

export type ClaimRow = DomainsTable;

export const claimsMigrations: Record<string, Migration> = {
  // Kept under its old name (databases that ran it know it by that name): the sandbox domains table
  // before this area existed; 0120 moves its rows into `domains` and drops it.
  '0104-sandboxes-domains': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('sandbox_domains')
        .addColumn('domain', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('port', 'integer', (c) => c.notNull())
        .addColumn('token', 'text', (c) => c.notNull())
        .addColumn('verified_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('sandbox_domains_pk', ['domain', 'owner_id'])
        .execute();
      await db.schema.createIndex('sandbox_domains_sandbox').on('sandbox_domains').column('sandbox_id').execute();
    },
  },
  // Sandbox domains (0104) move here: one table and one ownership rule for every kind of target.
  '0120-domains-claims': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('domains')
        .addColumn('domain', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('target_kind', 'text', (c) => c.notNull())
        .addColumn('target_id', 'text')
        .addColumn('port', 'integer')
        .addColumn('token', 'text', (c) => c.notNull())
        .addColumn('verified_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('domains_pk', ['domain', 'owner_id'])
        .execute();
      await db.schema.createIndex('domains_target').on('domains').columns(['target_kind', 'target_id']).execute();
      await sql`INSERT INTO domains (domain, owner_id, target_kind, target_id, port, token, verified_at, created_at)
        SELECT domain, owner_id, 'sandbox', sandbox_id, port, token, verified_at, created_at FROM sandbox_domains`.execute(db);
      await db.schema.dropTable('sandbox_domains').execute();
    },
  },
};

const fix = (r: ClaimRow): ClaimRow => ({
  ...r,
  port: r.port === null ? null : Number(r.port),
  verified_at: r.verified_at === null ? null : Number(r.verified_at),
  created_at: Number(r.created_at),
});

export class ClaimsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async get(domain: string, ownerId: string): Promise<ClaimRow | undefined> {
    const r = await this.db.selectFrom('domains').selectAll().where('domain', '=', domain).where('owner_id', '=', ownerId).executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  /** The row that holds the domain verified, whoever owns it. */
  async verifiedHolder(domain: string): Promise<ClaimRow | undefined> {
    const r = await this.db.selectFrom('domains').selectAll().where('domain', '=', domain).where('verified_at', 'is not', null).executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  async ofOwner(ownerId: string, workspaces?: readonly string[]): Promise<ClaimRow[]> {
    let q = this.db.selectFrom('domains').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return (await q.orderBy('domain').execute()).map(fix);
  }
  async ofTarget(kind: TargetKind, id: string): Promise<ClaimRow[]> {
    const rows = await this.db.selectFrom('domains').selectAll().where('target_kind', '=', kind).where('target_id', '=', id).orderBy('domain').execute();
    return rows.map(fix);
  }
  async allVerified(): Promise<ClaimRow[]> {
    return (await this.db.selectFrom('domains').selectAll().where('verified_at', 'is not', null).execute()).map(fix);
  }
  async upsert(row: ClaimRow): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('domains').where('domain', '=', row.domain).where('owner_id', '=', row.owner_id).execute();
      await trx.insertInto('domains').values(row).execute();
    });
  }
  /** Marks the owner's claim verified unless another owner's is (one statement: no race between two verifies). */
  async markVerified(domain: string, ownerId: string, at: number): Promise<boolean> {
    const r = await this.db
      .updateTable('domains')
      .set({ verified_at: at })
      .where('domain', '=', domain)
      .where('owner_id', '=', ownerId)
      .where((eb) =>
        eb.not(
          eb.exists(
            eb
              .selectFrom('domains as other')
              .select('other.domain')
              .where('other.domain', '=', domain)
              .where('other.owner_id', '<>', ownerId)
              .where('other.verified_at', 'is not', null),
          ),
        ),
      )
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }
  async delete(domain: string, ownerId: string): Promise<void> {
    await this.db.deleteFrom('domains').where('domain', '=', domain).where('owner_id', '=', ownerId).execute();
  }
  async detachTarget(kind: TargetKind, id: string): Promise<void> {
    await this.db.updateTable('domains').set({ target_kind: 'none', target_id: null, port: null }).where('target_kind', '=', kind).where('target_id', '=', id).execute();
  }
  async deleteTarget(kind: TargetKind, id: string): Promise<void> {
    await this.db.deleteFrom('domains').where('target_kind', '=', kind).where('target_id', '=', id).execute();
  }
}

export const domainWorkspaceMigrations: Record<string, Migration> = {
  '0280-domains-workspace': workspaceColumnMigration('domains', 'owner_id'),
};
