import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';
import type { StoredSection } from './render/page.js';
import type { ThemeName } from './render/themes.js';

interface DocumentsTable {
  id: string;
  owner_id: string;
  name: string;
  prompt: string | null;
  theme: string;
  custom_colors: string;
  sections: string;
  metadata: string;
  status: 'draft' | 'published';
  /** The site while published (the websites area owns it). */
  website_id: string | null;
  /** Kept across unpublish, so a later deploy comes back at the same URL when it is still free. */
  slug: string | null;
  created_at: number;
  updated_at: number;
  /** Pages written from the prompt by the LLM (a durable job): null when the pages are the sections sent. */
  generation_id: string | null;
  generation_status: GenerationStatus | null;
  generation_error: string | null;
  generation_updated_at: number | null;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

declare module '../../store/schema.js' {
  interface Tables {
    documents: DocumentsTable;
  }
}

export const documentsMigrations: Record<string, Migration> = {
  '0009-documents-documents': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('documents')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('prompt', 'text')
        .addColumn('theme', 'text', (c) => c.notNull())
        .addColumn('custom_colors', 'text', (c) => c.notNull())
        .addColumn('sections', 'text', (c) => c.notNull())
        .addColumn('metadata', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('website_id', 'text')
        .addColumn('slug', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('documents_owner').on('documents').columns(['owner_id', 'id']).execute();
      await db.schema.createIndex('documents_website').on('documents').column('website_id').execute();
    },
  },
  '0010-documents-generation': {
    async up(db: Kysely<unknown>) {
      // One column per statement: SQLite adds one column at a time.
      await db.schema.alterTable('documents').addColumn('generation_id', 'text').execute();
      await db.schema.alterTable('documents').addColumn('generation_status', 'text').execute();
      await db.schema.alterTable('documents').addColumn('generation_error', 'text').execute();
      await db.schema.alterTable('documents').addColumn('generation_updated_at', 'bigint').execute();
    },
  },
};

export type GenerationStatus = 'queued' | 'running' | 'done' | 'failed';

/** Where the pages of a prompt-only document stand. */
export interface Generation {
  id: string;
  status: GenerationStatus;
  error: string | null;
  updatedAt: number;
}

export interface DocumentRow {
  id: string;
  ownerId: string;
  name: string;
  prompt: string | null;
  theme: ThemeName;
  customColors: Record<string, string>;
  sections: StoredSection[];
  metadata: Record<string, unknown>;
  status: 'draft' | 'published';
  websiteId: string | null;
  slug: string | null;
  generation: Generation | null;
  createdAt: number;
  updatedAt: number;
  workspaceId: string;
}

const norm = (r: DocumentsTable): DocumentRow => ({
  id: r.id,
  ownerId: r.owner_id,
  name: r.name,
  prompt: r.prompt,
  theme: r.theme as ThemeName,
  customColors: JSON.parse(r.custom_colors) as Record<string, string>,
  sections: JSON.parse(r.sections) as StoredSection[],
  metadata: JSON.parse(r.metadata) as Record<string, unknown>,
  status: r.status,
  websiteId: r.website_id,
  slug: r.slug,
  generation:
    r.generation_id && r.generation_status
      ? {
          id: r.generation_id,
          status: r.generation_status,
          error: r.generation_error,
          updatedAt: Number(r.generation_updated_at ?? r.updated_at),
        }
      : null,
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
  workspaceId: r.workspace_id,
});

const columns = (d: Partial<DocumentRow>): Partial<DocumentsTable> => {
  const out: Partial<DocumentsTable> = {};
  if (d.name !== undefined) out.name = d.name;
  if (d.prompt !== undefined) out.prompt = d.prompt;
  if (d.theme !== undefined) out.theme = d.theme;
  if (d.customColors !== undefined) out.custom_colors = JSON.stringify(d.customColors);
  if (d.sections !== undefined) out.sections = JSON.stringify(d.sections);
  if (d.metadata !== undefined) out.metadata = JSON.stringify(d.metadata);
  if (d.status !== undefined) out.status = d.status;
  if (d.websiteId !== undefined) out.website_id = d.websiteId;
  if (d.slug !== undefined) out.slug = d.slug;
  if (d.updatedAt !== undefined) out.updated_at = d.updatedAt;
  if (d.generation !== undefined) {
    out.generation_id = d.generation?.id ?? null;
    out.generation_status = d.generation?.status ?? null;
    out.generation_error = d.generation?.error ?? null;
    out.generation_updated_at = d.generation?.updatedAt ?? null;
  }
  return out;
};

export class DocumentsRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  /** Runs `fn` in one transaction (a document and its generation job commit together). */
  transaction<T>(fn: (repo: DocumentsRepo, trx: Kysely<Tables>) => Promise<T>): Promise<T> {
    return this.db.transaction().execute((trx) => fn(new DocumentsRepo(trx), trx));
  }

  async insert(d: DocumentRow): Promise<void> {
    await this.db
      .insertInto('documents')
      .values({ ...(columns(d) as DocumentsTable), id: d.id, owner_id: d.ownerId, created_at: d.createdAt, workspace_id: d.workspaceId })
      .execute();
  }

  async owned(ownerId: string, id: string): Promise<DocumentRow | undefined> {
    const r = await this.db
      .selectFrom('documents')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r && norm(r);
  }

  async list(ownerId: string, workspaces?: readonly string[]): Promise<DocumentRow[]> {
    let q = this.db.selectFrom('documents').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    const rows = await q.orderBy('id', 'desc').execute();
    return rows.map(norm);
  }

  async update(ownerId: string, id: string, set: Partial<DocumentRow>): Promise<void> {
    await this.db
      .updateTable('documents')
      .set(columns(set))
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .execute();
  }

  /** Published at `site`, only if the document still points at `from` (the site the deploy started from). */
  async publish(
    ownerId: string,
    id: string,
    from: string | null,
    site: { websiteId: string; slug: string; now: number },
  ): Promise<boolean> {
    const r = await this.db
      .updateTable('documents')
      .set({ status: 'published', website_id: site.websiteId, slug: site.slug, updated_at: site.now })
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('website_id', from === null ? 'is' : '=', from)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Moves generation `generationId` along, only while it is still the document's current one (a PATCH
   * with sections or a newer prompt replaces it, and the older job's result is then dropped).
   */
  async advanceGeneration(
    ownerId: string,
    id: string,
    generationId: string,
    set: { status: GenerationStatus; error: string | null; now: number; sections?: StoredSection[] },
  ): Promise<boolean> {
    const r = await this.db
      .updateTable('documents')
      .set({
        generation_status: set.status,
        generation_error: set.error,
        generation_updated_at: set.now,
        ...(set.sections ? { sections: JSON.stringify(set.sections), updated_at: set.now } : {}),
      })
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('generation_id', '=', generationId)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** The site went away outside the documents area (DELETE /websites): back to draft. */
  async siteGone(websiteId: string, now: number): Promise<void> {
    await this.db
      .updateTable('documents')
      .set({ status: 'draft', website_id: null, updated_at: now })
      .where('website_id', '=', websiteId)
      .execute();
  }

  async delete(ownerId: string, id: string): Promise<boolean> {
    // A reply kept for one of its generations (llm-replies.ts) goes with it.
    await this.db.deleteFrom('document_llm_replies').where('document_id', '=', id).where('owner_id', '=', ownerId).execute();
    const r = await this.db
      .deleteFrom('documents')
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}

export const documentWorkspaceMigrations: Record<string, Migration> = {
  '0275-documents-workspace': workspaceColumnMigration('documents', 'owner_id'),
};
