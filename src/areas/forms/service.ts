// Forms on sites: a published site's pages declare forms (`<form data-nube-form="contact">`, read by
// the websites area at each deploy); visitors post to them; each accepted submission is stored with
// its fields, its files become files of the owner's (counted against the plan), and form.submitted is
// recorded in the same commit (the outbox). A form's record is made by its first accepted submission.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { cursorAfter, pageOf } from '../../platform/cursor-page.js';
import { newId } from '../../platform/ids.js';
import type { Outbox, OutboxEvent } from '../../platform/outbox.js';
import type { PlanName } from '../../platform/plans.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { FilesService } from '../files/service.js';
import type { WebsitesService } from '../websites/service.js';
import { type Fields, noFields, type Submission } from './body.js';
import { type FormsRepo, type FormSubmissionsTable, type FormsTable, fileIdsOf } from './repo.js';

/** The honeypot: a field people never see; a bot that fills it is answered as if it worked. */
export const HONEYPOT = '_gotcha';
/** Where to send the visitor afterwards (only to the site's own origins). */
export const REDIRECT_FIELD = '_redirect';
const CONTROL_FIELDS = new Set([HONEYPOT, REDIRECT_FIELD]);

export interface FormsDeps {
  repo: FormsRepo;
  websites: WebsitesService;
  files: FilesService;
  events: Outbox;
  planOf(ownerId: string): Promise<PlanName>;
  log: { warn(obj: Record<string, unknown>, msg?: string): void };
}

/** The live site a submission is addressed to, when it declares the form. */
export interface FormTarget {
  websiteId: string;
  ownerId: string;
  slug: string;
  form: string;
}

export interface StoredFile {
  field: string;
  fileId: string;
  name: string;
  contentType: string;
  size: number;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(Number(ms)).toISOString());

export class FormsService {
  constructor(readonly deps: FormsDeps) {}

  view(f: FormsTable) {
    return {
      id: f.id,
      name: f.name,
      websiteId: f.website_id,
      siteSlug: f.site_slug,
      siteUrl: this.deps.websites.siteUrl(f.site_slug),
      submissionCount: Number(f.submission_count),
      lastSubmissionAt: iso(f.last_submission_at),
      createdAt: iso(f.created_at)!,
    };
  }

  submissionView(s: FormSubmissionsTable) {
    return {
      id: s.id,
      formId: s.form_id,
      fields: JSON.parse(s.fields) as Fields,
      files: JSON.parse(s.files) as StoredFile[],
      createdAt: iso(s.created_at)!,
    };
  }

  // ---- the owner's side -------------------------------------------------------------------------

  private async owned(p: Principal, id: string): Promise<FormsTable> {
    const f = await this.deps.repo.owned(p.ownerId, id);
    if (!f) throw errors.notFound('form');
    return f;
  }

  async list(p: Principal, q: { limit: number; cursor?: string }) {
    const rows = await this.deps.repo.list(p.ownerId, q.limit + 1, cursorAfter(q.cursor, 'frm'));
    return pageOf(rows, q.limit, (r) => this.view(r));
  }

  async get(p: Principal, id: string) {
    return this.view(await this.owned(p, id));
  }

  /** The form and its submissions; their files go to the owner's trash (restorable for 7 days). */
  async delete(p: Principal, id: string) {
    const { deleted, files } = await this.deps.repo.deleteForm(p.ownerId, id);
    if (!deleted) throw errors.notFound('form');
    await this.trashFiles(p, files);
    return { ok: true as const };
  }

  async submissions(p: Principal, id: string, q: { limit: number; cursor?: string }) {
    const form = await this.owned(p, id);
    const rows = await this.deps.repo.submissions(form.id, q.limit + 1, cursorAfter(q.cursor, 'fsub'));
    return pageOf(rows, q.limit, (r) => this.submissionView(r));
  }

  async deleteSubmission(p: Principal, id: string, submissionId: string) {
    const form = await this.owned(p, id);
    const sub = await this.deps.repo.submission(form.id, submissionId);
    if (!sub || !(await this.deps.repo.deleteSubmission(form.id, submissionId)))
      throw errors.notFound('submission');
    await this.trashFiles(p, fileIdsOf(sub.files));
    return { ok: true as const };
  }

  private async trashFiles(p: Principal, ids: string[]): Promise<void> {
    for (const fileId of ids) {
      await this.deps.files.delete(p, fileId).catch((e: { status?: number }) => {
        // Already deleted by the owner (or purged): nothing left to do.
        if (e.status !== 404) throw e;
      });
    }
  }

  // ---- the visitor's side -----------------------------------------------------------------------

  /** The published site at `slug` when it declares `form`; else 404 (unknown, unpublished, undeclared). */
  async target(slug: string, form: string): Promise<FormTarget> {
    const live = await this.deps.websites.liveSite(slug);
    if (!live) throw errors.notFound('site');
    if (!live.site.forms.includes(form)) throw errors.notFound(`form "${form}" on this site`);
    return { websiteId: live.site.id, ownerId: live.site.ownerId, slug: live.site.slug, form };
  }

  /**
   * Stores an accepted submission: files first (as the owner's files, quota checked), then the
   * submission, the form's record on its first one, and form.submitted, in one commit. Control fields
   * (`_gotcha`, `_redirect`) are not stored. A filled honeypot stores nothing: `null`.
   */
  async submit(t: FormTarget, s: Submission): Promise<{ formId: string; submissionId: string } | null> {
    const honey = s.fields[HONEYPOT];
    if (honey !== undefined && (Array.isArray(honey) ? honey.some((v) => v !== '') : honey !== ''))
      return null;
    const fields = noFields();
    for (const [k, v] of Object.entries(s.fields)) if (!CONTROL_FIELDS.has(k)) fields[k] = v;
    // The plan (for the storage allowance) is read only when there are files to store.
    const plan = s.files.length > 0 ? await this.deps.planOf(t.ownerId) : 'byte';
    const owner: Principal = { scheme: 'owner', ownerId: t.ownerId, plan };
    const submissionId = newId('fsub');
    const stored: StoredFile[] = [];
    try {
      for (const f of s.files) {
        const file = await this.deps.files.createFromBytes(owner, {
          fileName: f.name,
          contentType: f.contentType,
          access: 'private',
          region: 'LATAM',
          data: f.data,
          metadata: { form: t.form, websiteId: t.websiteId, submissionId, field: f.field },
        });
        stored.push({
          field: f.field,
          fileId: file.id,
          name: f.name,
          contentType: f.contentType,
          size: f.data.length,
        });
      }
      const formId = await this.record(t, submissionId, fields, stored);
      return { formId, submissionId };
    } catch (e) {
      // No submission without its files, and no files of a submission that was not stored.
      await this.trashFiles(
        owner,
        stored.map((f) => f.fileId),
      ).catch((err: unknown) =>
        this.deps.log.warn({ err, submissionId }, 'could not remove the files of a failed submission'),
      );
      throw e;
    }
  }

  private async record(
    t: FormTarget,
    submissionId: string,
    fields: Fields,
    files: StoredFile[],
  ): Promise<string> {
    const now = Date.now();
    const attempt = () =>
      this.deps.events.atomically(async (trx, emit) => {
        let form = await this.deps.repo.bySiteName(t.websiteId, t.form, trx);
        if (!form) {
          form = {
            id: newId('frm'),
            owner_id: t.ownerId,
            website_id: t.websiteId,
            site_slug: t.slug,
            name: t.form,
            submission_count: 0,
            last_submission_at: null,
            created_at: now,
          };
          await this.deps.repo.insertForm(trx, form);
        }
        const row: FormSubmissionsTable = {
          id: submissionId,
          form_id: form.id,
          owner_id: t.ownerId,
          fields: JSON.stringify(fields),
          files: JSON.stringify(files),
          created_at: now,
        };
        await this.deps.repo.insertSubmission(trx, row);
        emit(this.submitted(form, row, fields, files));
        return form.id;
      });
    try {
      return await attempt();
    } catch (e) {
      // Two first submissions at once: one made the form's record; the other goes again and finds it.
      if (isUniqueViolation(e)) return attempt();
      throw e;
    }
  }

  /** The one place form.submitted is made. */
  private submitted(
    form: FormsTable,
    row: FormSubmissionsTable,
    fields: Fields,
    files: StoredFile[],
  ): OutboxEvent {
    return {
      event: 'form.submitted',
      ownerId: form.owner_id,
      data: {
        formId: form.id,
        formName: form.name,
        submissionId: row.id,
        websiteId: form.website_id,
        siteSlug: form.site_slug,
        siteUrl: this.deps.websites.siteUrl(form.site_slug),
        fields,
        files,
        fileIds: files.map((f) => f.fileId),
        submittedAt: iso(row.created_at),
      },
    };
  }
}
