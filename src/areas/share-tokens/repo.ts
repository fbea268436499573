import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

interface ShareTokensTable {
  id: string;
  owner_id: string;
  /** SHA-256 hex of the token; the token itself is shown once and never stored. */
  hash: string;
  preview: string;
  file_id: string | null;
  document_id: string | null;
  expires_at: number;
  created_at: number;
  revoked_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    share_tokens: ShareTokensTable;
  }
}

export const shareTokensMigrations: Record<string, Migration> = {
  '0004-share-tokens-tokens': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('share_tokens')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull().unique())
        .addColumn('preview', 'text', (c) => c.notNull())
        .addColumn('file_id', 'text')
        .addColumn('document_id', 'text')
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('revoked_at', 'bigint')
        .execute();
      await db.schema.createIndex('share_tokens_owner').on('share_tokens').columns(['owner_id', 'id']).execute();
    },
  },
};

export interface ShareTokenRow {
  id: string;
  ownerId: string;
  preview: string;
  fileId: string | null;
  documentId: string | null;
  expiresAt: number;
  createdAt: number;
  revokedAt: number | null;
}

const norm = (r: ShareTokensTable): ShareTokenRow => ({
  id: r.id,
  ownerId: r.owner_id,
  preview: r.preview,
  fileId: r.file_id,
  documentId: r.document_id,
  expiresAt: Number(r.expires_at),
  createdAt: Number(r.created_at),
  revokedAt: r.revoked_at === null ? null : Number(r.revoked_at),
});

export class ShareTokensRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: ShareTokenRow, hash: string): Promise<void> {
    await this.db
      .insertInto('share_tokens')
      .values({
        id: row.id,
        owner_id: row.ownerId,
        hash,
        preview: row.preview,
        file_id: row.fileId,
        document_id: row.documentId,
        expires_at: row.expiresAt,
        created_at: row.createdAt,
        revoked_at: null,
      })
      .execute();
  }

  async byHash(hash: string): Promise<ShareTokenRow | undefined> {
    const r = await this.db.selectFrom('share_tokens').selectAll().where('hash', '=', hash).executeTakeFirst();
    return r && norm(r);
  }

  async listLive(ownerId: string, now: number): Promise<ShareTokenRow[]> {
    const rows = await this.db
      .selectFrom('share_tokens')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .orderBy('id', 'desc')
      .execute();
    return rows.map(norm);
  }

  async revoke(ownerId: string, id: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('share_tokens')
      .set({ revoked_at: now })
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }
}
