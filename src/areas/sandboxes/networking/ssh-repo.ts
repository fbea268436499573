import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../../store/schema.js';

// SSH access: which sandboxes have it on, the tickets issued for them (only a hash of each secret),
// and the gateway's host key (sealed), kept in the store so every replica and restart shows one key.

interface SandboxSshTable {
  sandbox_id: string;
  owner_id: string;
  enabled_at: number;
}
interface SandboxSshTicketsTable {
  id: string;
  sandbox_id: string;
  /** SHA-256 hex of the ticket's secret. */
  secret_hash: string;
  expires_at: number;
  created_at: number;
}
interface SshHostKeysTable {
  name: string;
  key_sealed: string;
  created_at: number;
}

declare module '../../../store/schema.js' {
  interface Tables {
    sandbox_ssh: SandboxSshTable;
    sandbox_ssh_tickets: SandboxSshTicketsTable;
    ssh_host_keys: SshHostKeysTable;
  }
}

export const sshMigrations: Record<string, Migration> = {
  '0103-sandboxes-ssh': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('sandbox_ssh')
        .addColumn('sandbox_id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('enabled_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('sandbox_ssh_tickets')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('secret_hash', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('sandbox_ssh_tickets_sandbox').on('sandbox_ssh_tickets').column('sandbox_id').execute();
      await db.schema
        .createTable('ssh_host_keys')
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('key_sealed', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};

export class SshRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async enabled(sandboxId: string): Promise<boolean> {
    const r = await this.db.selectFrom('sandbox_ssh').select('sandbox_id').where('sandbox_id', '=', sandboxId).executeTakeFirst();
    return r !== undefined;
  }
  async anyEnabled(): Promise<boolean> {
    return (await this.db.selectFrom('sandbox_ssh').select('sandbox_id').limit(1).executeTakeFirst()) !== undefined;
  }
  async enable(sandboxId: string, ownerId: string): Promise<void> {
    if (await this.enabled(sandboxId)) return;
    await this.db.insertInto('sandbox_ssh').values({ sandbox_id: sandboxId, owner_id: ownerId, enabled_at: Date.now() }).execute();
  }
  /** Off, and every ticket gone with it. */
  async disable(sandboxId: string): Promise<void> {
    await this.db.deleteFrom('sandbox_ssh_tickets').where('sandbox_id', '=', sandboxId).execute();
    await this.db.deleteFrom('sandbox_ssh').where('sandbox_id', '=', sandboxId).execute();
  }
  async addTicket(t: SandboxSshTicketsTable): Promise<void> {
    // Expired tickets of this sandbox are dropped as new ones come.
    await this.db.deleteFrom('sandbox_ssh_tickets').where('sandbox_id', '=', t.sandbox_id).where('expires_at', '<', Date.now()).execute();
    await this.db.insertInto('sandbox_ssh_tickets').values(t).execute();
  }
  async validTicket(sandboxId: string, secretHash: string, now: number): Promise<boolean> {
    const r = await this.db
      .selectFrom('sandbox_ssh_tickets')
      .select('id')
      .where('sandbox_id', '=', sandboxId)
      .where('secret_hash', '=', secretHash)
      .where('expires_at', '>', now)
      .executeTakeFirst();
    return r !== undefined;
  }
  async hostKey(name: string): Promise<string | undefined> {
    const r = await this.db.selectFrom('ssh_host_keys').select('key_sealed').where('name', '=', name).executeTakeFirst();
    return r?.key_sealed;
  }
  /** First writer wins: a replica that raced answers the key already stored. */
  async putHostKey(name: string, sealed: string): Promise<string> {
    try {
      await this.db.insertInto('ssh_host_keys').values({ name, key_sealed: sealed, created_at: Date.now() }).execute();
      return sealed;
    } catch (e) {
      const had = await this.hostKey(name);
      if (had) return had;
      throw e;
    }
  }
}
