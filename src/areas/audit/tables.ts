import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

export interface AuditEntriesTable {
  /** `aud_<time><random>`: time-ordered, the list's cursor. */
  id: string;
  /** The account; '' when the refused credential named none. */
  owner_id: string;
  /** Position in the account's chain, from 1, without gaps. */
  seq: number;
  prev_hash: string;
  hash: string;
  created_at: number;
  workspace_id: string | null;
  key_id: string | null;
  key_name: string | null;
  /** The credential's scheme (owner, agent, database, ...), null when none was resolved. */
  scheme: string | null;
  operation: string;
  method: string;
  resource_id: string | null;
  status: number;
  error_code: string | null;
  source_ip: string | null;
  user_agent: string | null;
  request_id: string;
  /** `rest` or `mcp` (a tool call replayed through its REST route). */
  via: string;
  /**
   * Account-less refusals (unknown keys) past the first few per address and window are not written
   * one by one: one entry then stands for this many more like it, from the same address (null: one).
   */
  repeats?: number | null;
}

/** Each account's chain head, and the anchor left by retention (the last pruned entry's seq and hash). */
export interface AuditChainsTable {
  owner_id: string;
  seq: number;
  hash: string;
  pruned_seq: number;
  pruned_hash: string;
}

declare module '../../store/schema.js' {
  interface Tables {
    audit_entries: AuditEntriesTable;
    audit_chains: AuditChainsTable;
  }
}

export const auditMigrations: Record<string, Migration> = {
  '0250-audit': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('audit_entries')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .addColumn('prev_hash', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('workspace_id', 'text')
        .addColumn('key_id', 'text')
        .addColumn('key_name', 'text')
        .addColumn('scheme', 'text')
        .addColumn('operation', 'text', (c) => c.notNull())
        .addColumn('method', 'text', (c) => c.notNull())
        .addColumn('resource_id', 'text')
        .addColumn('status', 'integer', (c) => c.notNull())
        .addColumn('error_code', 'text')
        .addColumn('source_ip', 'text')
        .addColumn('user_agent', 'text')
        .addColumn('request_id', 'text', (c) => c.notNull())
        .addColumn('via', 'text', (c) => c.notNull())
        .execute();
      // The chain's order: verify, retention, and the list (newest first). Every index is written by
      // each mutating call, so there is no other but the resource filter's.
      await db.schema.createIndex('audit_entries_chain').unique().on('audit_entries').columns(['owner_id', 'seq']).execute();
      await db.schema
        .createIndex('audit_entries_resource')
        .on('audit_entries')
        .columns(['owner_id', 'resource_id', 'id'])
        .where(sql.ref('resource_id'), 'is not', null)
        .execute();
      await db.schema
        .createTable('audit_chains')
        .addColumn('owner_id', 'text', (c) => c.primaryKey())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('pruned_seq', 'bigint', (c) => c.notNull())
        .addColumn('pruned_hash', 'text', (c) => c.notNull())
        .execute();
      // An entry moves its chain's head in the statement that inserts it: appending is one statement.
      if (db.getExecutor().adapter instanceof PostgresAdapter) {
        await sql`CREATE FUNCTION audit_chain_head() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            UPDATE audit_chains SET seq = NEW.seq, hash = NEW.hash WHERE owner_id = NEW.owner_id AND seq < NEW.seq;
            RETURN NULL;
          END $$`.execute(db);
        await sql`CREATE TRIGGER audit_chain_head AFTER INSERT ON audit_entries FOR EACH ROW EXECUTE FUNCTION audit_chain_head()`.execute(db);
      } else {
        await sql`CREATE TRIGGER audit_chain_head AFTER INSERT ON audit_entries BEGIN
          UPDATE audit_chains SET seq = NEW.seq, hash = NEW.hash WHERE owner_id = NEW.owner_id AND seq < NEW.seq;
        END`.execute(db);
      }
    },
  },
  // Refusals of unknown credentials are aggregated per address and window (refusals.ts): the count.
  '0253-audit-repeats': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('audit_entries').addColumn('repeats', 'integer').execute();
    },
  },
};
