import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../../store/schema.js';

// Custom domains on sandbox ports: one row per (domain, owner). Several owners may claim a domain;
// only one can have it verified, and only a verified row routes traffic.

interface SandboxDomainsTable {
  domain: string;
  owner_id: string;
  sandbox_id: string;
  port: number;
  /** Value of the TXT record that proves ownership. */
  token: string;
  verified_at: number | null;
  created_at: number;
}

declare module '../../../store/schema.js' {
  interface Tables {
    sandbox_domains: SandboxDomainsTable;
  }
}

export type DomainRow = SandboxDomainsTable;

export const domainsMigrations: Record<string, Migration> = {
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
};

const fix = (r: DomainRow): DomainRow => ({
  ...r,
  verified_at: r.verified_at === null ? null : Number(r.verified_at),
  created_at: Number(r.created_at),
});

export class DomainsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async get(domain: string, ownerId: string): Promise<DomainRow | undefined> {
    const r = await this.db
      .selectFrom('sandbox_domains')
      .selectAll()
      .where('domain', '=', domain)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  /** The row that holds the domain verified, whoever owns it. */
  async verifiedHolder(domain: string): Promise<DomainRow | undefined> {
    const r = await this.db
      .selectFrom('sandbox_domains')
      .selectAll()
      .where('domain', '=', domain)
      .where('verified_at', 'is not', null)
      .executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  async ofSandbox(sandboxId: string): Promise<DomainRow[]> {
    const rows = await this.db.selectFrom('sandbox_domains').selectAll().where('sandbox_id', '=', sandboxId).orderBy('domain').execute();
    return rows.map(fix);
  }
  async allVerified(): Promise<DomainRow[]> {
    return (await this.db.selectFrom('sandbox_domains').selectAll().where('verified_at', 'is not', null).execute()).map(fix);
  }
  async upsert(row: DomainRow): Promise<void> {
    await this.db.deleteFrom('sandbox_domains').where('domain', '=', row.domain).where('owner_id', '=', row.owner_id).execute();
    await this.db.insertInto('sandbox_domains').values(row).execute();
  }
  async markVerified(domain: string, ownerId: string, at: number): Promise<void> {
    await this.db
      .updateTable('sandbox_domains')
      .set({ verified_at: at })
      .where('domain', '=', domain)
      .where('owner_id', '=', ownerId)
      .execute();
  }
  async delete(domain: string, ownerId: string): Promise<void> {
    await this.db.deleteFrom('sandbox_domains').where('domain', '=', domain).where('owner_id', '=', ownerId).execute();
  }
  async deleteSandbox(sandboxId: string): Promise<void> {
    await this.db.deleteFrom('sandbox_domains').where('sandbox_id', '=', sandboxId).execute();
  }
}
