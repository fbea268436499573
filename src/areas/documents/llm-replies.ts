// The LLM's reply to a generation, kept from the moment it arrives until the pages made from it are
// stored: a generation cut after the answer came (nube killed, or stopped) makes its pages from the
// kept reply when it runs again, instead of asking (and paying) the LLM a second time. Its own table,
// apart from the document row, so keeping it never waits on a write to the document.
import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

interface RepliesTable {
  generation_id: string;
  owner_id: string;
  document_id: string;
  /** The chat completion as the LLM gateway answered it. */
  reply: string;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    document_llm_replies: RepliesTable;
  }
}

export const replyMigrations: Record<string, Migration> = {
  '0124-documents-llm-replies': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('document_llm_replies')
        .addColumn('generation_id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('document_id', 'text', (c) => c.notNull())
        .addColumn('reply', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('document_llm_replies_document').on('document_llm_replies').column('document_id').execute();
    },
  },
};

export class LlmReplies {
  constructor(private readonly db: Kysely<Tables>) {}

  async get(ownerId: string, generationId: string): Promise<string | null> {
    const r = await this.db
      .selectFrom('document_llm_replies')
      .select('reply')
      .where('generation_id', '=', generationId)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r?.reply ?? null;
  }

  /** Keeps a reply (a second one for the same generation, from a run that raced this one, is dropped). */
  async keep(row: { generationId: string; ownerId: string; documentId: string; reply: string }): Promise<void> {
    await this.db
      .insertInto('document_llm_replies')
      .values({ generation_id: row.generationId, owner_id: row.ownerId, document_id: row.documentId, reply: row.reply, created_at: Date.now() })
      .onConflict((oc) => oc.column('generation_id').doNothing())
      .execute();
  }

  /** Drops a generation's reply once its pages are stored (or it is no longer the document's). */
  async drop(generationId: string): Promise<void> {
    await this.db.deleteFrom('document_llm_replies').where('generation_id', '=', generationId).execute();
  }
}
