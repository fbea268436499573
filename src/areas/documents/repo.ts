import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';
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
};

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
  createdAt: number;
  updatedAt: number;
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
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
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
  return out;
};

export class DocumentsRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  async insert(d: DocumentRow): Promise<void> {
    await this.db
      .insertInto('documents')
      .values({ ...(columns(d) as DocumentsTable), id: d.id, owner_id: d.ownerId, created_at: d.createdAt })
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

  async list(ownerId: string): Promise<DocumentRow[]> {
    const rows = await this.db
      .selectFrom('documents')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .orderBy('id', 'desc')
      .execute();
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

  /** The site went away outside the documents area (DELETE /websites): back to draft. */
  async siteGone(websiteId: string, now: number): Promise<void> {
    await this.db
      .updateTable('documents')
      .set({ status: 'draft', website_id: null, updated_at: now })
      .where('website_id', '=', websiteId)
      .execute();
  }

  async delete(ownerId: string, id: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('documents')
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}
