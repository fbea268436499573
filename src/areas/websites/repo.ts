import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

interface WebsitesTable {
  id: string;
  owner_id: string;
  name: string;
  /** Globally unique: the site answers at `<slug>.<sites host>`. */
  slug: string;
  source: 'archive' | 'document';
  document_id: string | null;
  /** JSON `{ [path]: [sha256, size, contentType] }`: what the site serves, by content hash. */
  manifest: string;
  file_count: number;
  total_bytes: number;
  /** Bumped by every deploy; a deploy commits only over the version it started from. */
  version: number;
  /** JSON array of the form names its pages declare (`data-nube-form`), read at each deploy. */
  forms: string;
  created_at: number;
  updated_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

declare module '../../store/schema.js' {
  interface Tables {
    websites: WebsitesTable;
  }
}

export const websitesMigrations: Record<string, Migration> = {
  '0008-websites-websites': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('websites')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('slug', 'text', (c) => c.notNull().unique())
        .addColumn('source', 'text', (c) => c.notNull())
        .addColumn('document_id', 'text')
        .addColumn('manifest', 'text', (c) => c.notNull())
        .addColumn('file_count', 'integer', (c) => c.notNull())
        .addColumn('total_bytes', 'bigint', (c) => c.notNull())
        .addColumn('version', 'integer', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('websites_owner').on('websites').columns(['owner_id', 'id']).execute();
    },
  },
  '0220-websites-forms': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('websites')
        .addColumn('forms', 'text', (c) => c.notNull().defaultTo('[]'))
        .execute();
    },
  },
};

/** path -> [sha256 hex, size, content type] */
export type Manifest = Record<string, [string, number, string]>;

export interface WebsiteRow {
  id: string;
  ownerId: string;
  name: string;
  slug: string;
  source: 'archive' | 'document';
  documentId: string | null;
  fileCount: number;
  totalBytes: number;
  version: number;
  /** Form names its pages declare. */
  forms: string[];
  createdAt: number;
  updatedAt: number;
  workspaceId: string;
}

export type WebsiteWithManifest = WebsiteRow & { manifest: Manifest };

const SUMMARY = [
  'id',
  'owner_id',
  'name',
  'slug',
  'source',
  'document_id',
  'file_count',
  'total_bytes',
  'version',
  'forms',
  'created_at',
  'updated_at',
  'workspace_id',
] as const;

type Summary = Pick<WebsitesTable, (typeof SUMMARY)[number]>;

const norm = (r: Summary): WebsiteRow => ({
  id: r.id,
  ownerId: r.owner_id,
  name: r.name,
  slug: r.slug,
  source: r.source,
  documentId: r.document_id,
  fileCount: Number(r.file_count),
  totalBytes: Number(r.total_bytes),
  version: Number(r.version),
  forms: JSON.parse(r.forms) as string[],
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
  workspaceId: r.workspace_id,
});

export class WebsitesRepo {
  constructor(private readonly db: Kysely<Tables>) {}

  /** Writes take an optional transaction: the service commits a change with its event (outbox). */
  async insert(row: WebsiteRow, manifest: Manifest, db: Kysely<Tables> = this.db): Promise<void> {
    await db
      .insertInto('websites')
      .values({
        id: row.id,
        owner_id: row.ownerId,
        name: row.name,
        slug: row.slug,
        source: row.source,
        document_id: row.documentId,
        manifest: JSON.stringify(manifest),
        file_count: row.fileCount,
        total_bytes: row.totalBytes,
        version: row.version,
        forms: JSON.stringify(row.forms),
        created_at: row.createdAt,
        updated_at: row.updatedAt,
        workspace_id: row.workspaceId,
      })
      .execute();
  }

  async owned(ownerId: string, id: string): Promise<WebsiteWithManifest | undefined> {
    const r = await this.db
      .selectFrom('websites')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r && { ...norm(r), manifest: JSON.parse(r.manifest) as Manifest };
  }

  async bySlug(slug: string): Promise<WebsiteWithManifest | undefined> {
    const r = await this.db.selectFrom('websites').selectAll().where('slug', '=', slug).executeTakeFirst();
    return r && { ...norm(r), manifest: JSON.parse(r.manifest) as Manifest };
  }

  async slugOf(id: string): Promise<string | null> {
    const r = await this.db.selectFrom('websites').select('slug').where('id', '=', id).executeTakeFirst();
    return r?.slug ?? null;
  }

  async slugTaken(slug: string): Promise<boolean> {
    return (
      (await this.db.selectFrom('websites').select('id').where('slug', '=', slug).executeTakeFirst()) !==
      undefined
    );
  }

  async list(ownerId: string, workspaces?: readonly string[]): Promise<WebsiteRow[]> {
    let q = this.db.selectFrom('websites').select(SUMMARY).where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    const rows = await q.orderBy('id', 'desc').execute();
    return rows.map(norm);
  }

  /** New content over `fromVersion`; false when another deploy committed first. */
  async replaceContent(
    id: string,
    fromVersion: number,
    manifest: Manifest,
    set: { name?: string; fileCount: number; totalBytes: number; forms: string[]; updatedAt: number },
  ): Promise<boolean> {
    const r = await this.db
      .updateTable('websites')
      .set({
        manifest: JSON.stringify(manifest),
        file_count: set.fileCount,
        total_bytes: set.totalBytes,
        forms: JSON.stringify(set.forms),
        updated_at: set.updatedAt,
        version: fromVersion + 1,
        ...(set.name !== undefined ? { name: set.name } : {}),
      })
      .where('id', '=', id)
      .where('version', '=', fromVersion)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Bytes of the owner's sites (file sizes as published), for the storage allowance. */
  async storedBytes(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('websites')
      .select((eb) => eb.fn.sum<number | string | null>('total_bytes').as('bytes'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r?.bytes ?? 0);
  }

  async delete(ownerId: string, id: string, db: Kysely<Tables> = this.db): Promise<boolean> {
    const r = await db
      .deleteFrom('websites')
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}

export const websiteWorkspaceMigrations: Record<string, Migration> = {
  '0278-websites-workspace': workspaceColumnMigration('websites', 'owner_id'),
};
