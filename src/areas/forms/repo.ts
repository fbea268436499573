import { type Kysely, type Migration, sql, type Transaction } from 'kysely';
import type { Tables } from '../../store/schema.js';

export interface FormsTable {
  id: string;
  owner_id: string;
  /** The site whose pages declare it; the form (and its submissions) outlive the site. */
  website_id: string;
  /** The site's slug when the form was made (slugs never change), for lists once the site is gone. */
  site_slug: string;
  name: string;
  submission_count: number;
  last_submission_at: number | null;
  created_at: number;
}

export interface FormSubmissionsTable {
  id: string;
  form_id: string;
  owner_id: string;
  /** JSON `{ [field]: string | string[] }`. */
  fields: string;
  /** JSON `[{ field, fileId, name, contentType, size }]`: uploads stored as files of the owner's. */
  files: string;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    forms: FormsTable;
    form_submissions: FormSubmissionsTable;
  }
}

export const formsMigrations: Record<string, Migration> = {
  '0221-forms': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('forms')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('website_id', 'text', (c) => c.notNull())
        .addColumn('site_slug', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('submission_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('last_submission_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addUniqueConstraint('forms_site_name', ['website_id', 'name'])
        .execute();
      await db.schema.createIndex('forms_owner').on('forms').columns(['owner_id', 'id']).execute();
      await db.schema
        .createTable('form_submissions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('form_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('fields', 'text', (c) => c.notNull())
        .addColumn('files', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('form_submissions_form')
        .on('form_submissions')
        .columns(['form_id', 'id'])
        .execute();
    },
  },
};

type Db = Kysely<Tables> | Transaction<Tables>;

export class FormsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  owned(ownerId: string, id: string): Promise<FormsTable | undefined> {
    return this.db
      .selectFrom('forms')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
  }

  bySiteName(websiteId: string, name: string, db: Db = this.db): Promise<FormsTable | undefined> {
    return db
      .selectFrom('forms')
      .selectAll()
      .where('website_id', '=', websiteId)
      .where('name', '=', name)
      .executeTakeFirst();
  }

  /** Newest first; `before` an id from the previous page. */
  list(ownerId: string, limit: number, before?: string): Promise<FormsTable[]> {
    let q = this.db.selectFrom('forms').selectAll().where('owner_id', '=', ownerId);
    if (before) q = q.where('id', '<', before);
    return q.orderBy('id', 'desc').limit(limit).execute();
  }

  async insertForm(db: Db, row: FormsTable): Promise<void> {
    await db.insertInto('forms').values(row).execute();
  }

  async insertSubmission(db: Db, row: FormSubmissionsTable): Promise<void> {
    await db.insertInto('form_submissions').values(row).execute();
    await db
      .updateTable('forms')
      .set({ submission_count: sql`submission_count + 1`, last_submission_at: row.created_at })
      .where('id', '=', row.form_id)
      .execute();
  }

  submissions(formId: string, limit: number, before?: string): Promise<FormSubmissionsTable[]> {
    let q = this.db.selectFrom('form_submissions').selectAll().where('form_id', '=', formId);
    if (before) q = q.where('id', '<', before);
    return q.orderBy('id', 'desc').limit(limit).execute();
  }

  submission(formId: string, id: string): Promise<FormSubmissionsTable | undefined> {
    return this.db
      .selectFrom('form_submissions')
      .selectAll()
      .where('form_id', '=', formId)
      .where('id', '=', id)
      .executeTakeFirst();
  }

  /** Removes one submission and counts it out; false when it was already gone. */
  async deleteSubmission(formId: string, id: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .deleteFrom('form_submissions')
        .where('form_id', '=', formId)
        .where('id', '=', id)
        .executeTakeFirst();
      if (Number(r.numDeletedRows) !== 1) return false;
      await trx
        .updateTable('forms')
        .set({ submission_count: sql`submission_count - 1` })
        .where('id', '=', formId)
        .execute();
      return true;
    });
  }

  /** The form and its submissions; the files they name, for the caller to remove. */
  async deleteForm(ownerId: string, id: string): Promise<{ deleted: boolean; files: string[] }> {
    return this.db.transaction().execute(async (trx) => {
      const subs = await trx
        .selectFrom('form_submissions')
        .select('files')
        .where('form_id', '=', id)
        .execute();
      const r = await trx
        .deleteFrom('forms')
        .where('id', '=', id)
        .where('owner_id', '=', ownerId)
        .executeTakeFirst();
      if (Number(r.numDeletedRows) !== 1) return { deleted: false, files: [] };
      await trx.deleteFrom('form_submissions').where('form_id', '=', id).execute();
      return { deleted: true, files: subs.flatMap((s) => fileIdsOf(s.files)) };
    });
  }
}

export const fileIdsOf = (json: string): string[] =>
  (JSON.parse(json) as { fileId: string }[]).map((f) => f.fileId);
