import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

interface ConsoleSessionsTable {
  id: string;
  /** SHA-256 hex of the cookie's token: the token itself is never stored. */
  token_hash: string;
  owner_id: string;
  /** The API key signed in with: revoking it ends the session. */
  key_id: string;
  created_at: number;
  expires_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    console_sessions: ConsoleSessionsTable;
  }
}

export const consoleMigrations: Record<string, Migration> = {
  '0160-console-sessions': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('console_sessions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('token_hash', 'text', (c) => c.notNull().unique())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('key_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('console_sessions_expires').on('console_sessions').column('expires_at').execute();
    },
  },
};

export interface SessionRow {
  id: string;
  ownerId: string;
  keyId: string;
  expiresAt: number;
}

export class ConsoleSessionsRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: SessionRow & { tokenHash: string; createdAt: number }): Promise<void> {
    await this.db
      .insertInto('console_sessions')
      .values({
        id: row.id,
        token_hash: row.tokenHash,
        owner_id: row.ownerId,
        key_id: row.keyId,
        created_at: row.createdAt,
        expires_at: row.expiresAt,
      })
      .execute();
  }

  async byToken(tokenHash: string, now: number): Promise<SessionRow | undefined> {
    const r = await this.db
      .selectFrom('console_sessions')
      .select(['id', 'owner_id', 'key_id', 'expires_at'])
      .where('token_hash', '=', tokenHash)
      .where('expires_at', '>', now)
      .executeTakeFirst();
    return r && { id: r.id, ownerId: r.owner_id, keyId: r.key_id, expiresAt: Number(r.expires_at) };
  }

  async delete(tokenHash: string): Promise<boolean> {
    const r = await this.db.deleteFrom('console_sessions').where('token_hash', '=', tokenHash).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async purgeExpired(now: number): Promise<number> {
    const r = await this.db.deleteFrom('console_sessions').where('expires_at', '<=', now).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
