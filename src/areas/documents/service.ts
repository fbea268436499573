import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import { type Browser, BrowserUnavailable, type PdfFormat, RenderTimeout } from '../../browser/index.js';
import type { Kysely } from 'kysely';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { JobQueue } from '../../platform/jobs.js';
import { capKeyId, type Usage } from '../../platform/usage.js';
import type { Tables } from '../../store/schema.js';
import type { FilesService } from '../files/service.js';
import type { SiteEntry, SiteFile } from '../websites/site-files.js';
import type { WebsitesService } from '../websites/service.js';
import { slugFrom } from '../websites/slug.js';
import { GENERATE_JOB, type GenerateJob, generateJobKey } from './generation.js';
import { llmNotConfigured, type PageWriter } from './page-writer.js';
import {
  assetPath,
  documentHtml,
  type ImageSrc,
  pageId,
  type RenderDoc,
  type StoredSection,
} from './render/page.js';
import type { ThemeName } from './render/themes.js';
import type { DocumentRow, DocumentsRepo } from './repo.js';
import { imageFileIds, normalizeSections, pickSections, type SectionInput } from './sections.js';

export interface DocumentInput {
  name?: string;
  prompt?: string;
  theme?: ThemeName;
  customColors?: Record<string, string>;
  sections?: SectionInput[];
  metadata?: Record<string, unknown>;
}

export interface DocumentsDeps {
  repo: DocumentsRepo;
  files: FilesService;
  websites: WebsitesService;
  browser: Browser;
  /** Writes pages from a prompt; absent, prompt-only documents answer 400 naming the setting. */
  pageWriter?: PageWriter;
  jobs: JobQueue;
  pdfTimeoutMs: number;
  /** A scoped key's llmTokens cap, checked before its pages are asked for. */
  usage: Pick<Usage, 'assertKeyCaps'>;
  workspaces: WorkspaceRegistry;
}

const DEFAULT_THEME: ThemeName = 'classic';
const RASTER = /^image\/(png|jpeg|gif|webp|avif)$/;
/** An image is read into memory only to be drawn into a PDF; past this size the PDF shows it missing. */
const PDF_IMAGE_BYTES = 25 * 1024 * 1024;

export class DocumentsService {
  constructor(private readonly deps: DocumentsDeps) {
    deps.websites.onDeleted(async (site) => {
      if (site.source === 'document') await deps.repo.siteGone(site.id, Date.now());
    });
  }

  view(d: DocumentRow, pages?: ReturnType<DocumentsService['pages']>) {
    return {
      id: d.id,
      name: d.name,
      prompt: d.prompt,
      theme: d.theme,
      customColors: d.customColors,
      sections: d.sections,
      metadata: d.metadata,
      status: d.status,
      url: d.status === 'published' && d.slug ? this.deps.websites.siteUrl(d.slug) : null,
      websiteId: d.status === 'published' ? d.websiteId : null,
      slug: d.slug,
      generation: d.generation
        ? {
            status: d.generation.status,
            error: d.generation.error,
            updatedAt: new Date(d.generation.updatedAt).toISOString(),
          }
        : null,
      pageCount: d.sections.length,
      createdAt: new Date(d.createdAt).toISOString(),
      updatedAt: new Date(d.updatedAt).toISOString(),
      workspaceId: d.workspaceId,
      ...(pages ? { pages } : {}),
    };
  }

  async create(p: Principal, input: DocumentInput & { name: string; workspaceId?: string }) {
    const workspaceId = await this.deps.workspaces.forCreate(p, input.workspaceId);
    const generate = await this.wantsGeneration(p, input.prompt, input.sections);
    const sections = generate ? [] : await this.sectionsOf(p, input.sections);
    const now = Date.now();
    const row: DocumentRow = {
      id: newId('doc'),
      ownerId: p.ownerId,
      name: input.name,
      prompt: input.prompt ?? null,
      theme: input.theme ?? DEFAULT_THEME,
      customColors: input.customColors ?? {},
      sections,
      metadata: input.metadata ?? {},
      status: 'draft',
      websiteId: null,
      slug: null,
      generation: generate ? { id: newId('gen'), status: 'queued', error: null, updatedAt: now } : null,
      createdAt: now,
      updatedAt: now,
      workspaceId,
    };
    await this.deps.repo.transaction(async (repo, trx) => {
      await repo.insert(row);
      if (row.generation) await this.enqueueGeneration(p, row, row.generation.id, trx);
    });
    if (row.generation) this.deps.jobs.notify();
    return { document: this.view(row) };
  }

  async list(p: Principal, workspaceId?: string) {
    const ws = await this.deps.workspaces.filter(p, workspaceId);
    return { items: (await this.deps.repo.list(p.ownerId, ws)).map((d) => this.view(d)) };
  }

  async get(p: Principal, id: string) {
    const d = await this.owned(p, id);
    return this.view(d, this.pages(d, await this.readUrls(p, d.sections)));
  }

  async update(p: Principal, id: string, input: DocumentInput) {
    const d = await this.owned(p, id);
    const now = Date.now();
    const set: Partial<DocumentRow> = { updatedAt: now };
    if (input.name !== undefined) set.name = input.name;
    if (input.prompt !== undefined) set.prompt = input.prompt;
    if (input.theme !== undefined) set.theme = input.theme;
    if (input.customColors !== undefined) set.customColors = input.customColors;
    if (input.metadata !== undefined) set.metadata = input.metadata;
    // The pages are written again when asked to (a prompt with `sections: []`) or when the prompt of a
    // document whose pages came from its prompt changes; sections sent by the caller replace the pages.
    const prompt = input.prompt ?? d.prompt ?? undefined;
    const regenerate =
      input.sections === undefined
        ? input.prompt !== undefined &&
          input.prompt !== d.prompt &&
          (d.generation !== null || d.sections.length === 0)
        : input.sections.length === 0;
    const generate = regenerate && (await this.wantsGeneration(p, prompt, input.sections ?? []));
    if (generate) {
      set.generation = { id: newId('gen'), status: 'queued', error: null, updatedAt: now };
      if (input.sections !== undefined) set.sections = [];
    } else if (input.sections !== undefined) {
      set.sections = await this.sectionsOf(p, input.sections);
      set.generation = null;
    }
    await this.deps.repo.transaction(async (repo, trx) => {
      await repo.update(p.ownerId, id, set);
      if (set.generation) await this.enqueueGeneration(p, d, set.generation.id, trx);
    });
    if (set.generation) this.deps.jobs.notify();
    // Sections sent by hand: a generation still queued has nothing left to do.
    else if (set.generation === null && d.generation)
      await this.deps.jobs.cancel({ key: generateJobKey(id) });
    const updated = { ...d, ...set };
    return this.view(updated, this.pages(updated, await this.readUrls(p, updated.sections)));
  }

  async delete(p: Principal, id: string): Promise<void> {
    const d = await this.owned(p, id);
    if (d.websiteId) await this.deps.websites.removeDocumentSite(p, d.websiteId);
    await this.deps.repo.delete(p.ownerId, id);
    if (d.generation) await this.deps.jobs.cancel({ key: generateJobKey(id) });
  }

  /** Publishes the pages as a site (created on first deploy, updated after) at `<slug>.<sites host>`. */
  async deploy(p: Principal, id: string) {
    const d = await this.owned(p, id);
    if (d.sections.length === 0) throw noPages(d);
    const files: (SiteFile | SiteEntry)[] = [
      { path: 'index.html', data: Buffer.from(documentHtml(renderable(d), d.sections)) },
    ];
    for (const fileId of imageFileIds(d.sections)) {
      const row = await this.deps.files.doneRow(p, fileId).catch(() => undefined);
      if (!row?.sha256) continue;
      // Raster images only keep their type: an SVG or HTML "image" must not become a live page of the site.
      const contentType = RASTER.test(row.content_type) ? row.content_type : 'application/octet-stream';
      // Streamed from the files store into the site's when it is stored, never whole in memory.
      files.push({ path: assetPath(fileId), size: row.size, sha256: row.sha256, contentType, open: () => this.fileChunks(p, fileId) });
    }
    const site = await this.deps.websites.publishDocument(
      p,
      { documentId: d.id, name: d.name, websiteId: d.websiteId, slug: d.slug ?? slugFrom(d.name), workspaceId: d.workspaceId },
      files,
    );
    // Guarded on the site the deploy started from: of two first deploys at once, one site wins and the
    // other request takes its own site down again instead of leaving an orphan on the air.
    const won = await this.deps.repo.publish(p.ownerId, id, d.websiteId, {
      websiteId: site.id,
      slug: site.slug,
      now: Date.now(),
    });
    if (!won) {
      if (site.id !== d.websiteId) await this.deps.websites.removeDocumentSite(p, site.id);
      throw errors.conflict(
        'the document was deployed or unpublished by another request meanwhile; try again',
        'DocumentChanged',
      );
    }
    return { url: site.url, websiteId: site.id, slug: site.slug };
  }

  async unpublish(p: Principal, id: string): Promise<void> {
    const d = await this.owned(p, id);
    if (d.websiteId) await this.deps.websites.removeDocumentSite(p, d.websiteId);
    await this.deps.repo.update(p.ownerId, id, { status: 'draft', websiteId: null, updatedAt: Date.now() });
  }

  /**
   * The PDF of the document (or of the sections named). A share principal may export only the document
   * its token was made for (403 otherwise, as for a bad token).
   */
  async pdf(p: Principal, id: string, q: { sections?: string }): Promise<{ pdf: Buffer; name: string }> {
    if (p.scheme === 'share' && p.resourceId !== id) {
      throw errors.forbidden('this share token does not grant this document', 'ShareTokenNotForThis');
    }
    const d = await this.owned(p, id);
    const sections = pickSections(d.sections, q.sections);
    if (sections.length === 0) throw noPages(d);
    const allowed = new Set(imageFileIds(sections).map(assetPath));
    const pdf = await this.deps.browser
      .pdf({
        html: documentHtml(renderable(d), sections),
        format: formatOf(d),
        timeoutMs: this.deps.pdfTimeoutMs,
        // Only the images of these sections, read from the owner's files; anything else is a 404.
        asset: async (path) =>
          allowed.has(path) ? this.fileBytes(p, decodeURIComponent(path.slice('assets/'.length))) : null,
      })
      .catch((e: Error) => {
        // Not the caller's fault and not a bug: the browser is missing, or the document took too long.
        if (e instanceof BrowserUnavailable)
          throw errors.unavailable('the PDF renderer is not available on this server', 5);
        if (e instanceof RenderTimeout) throw errors.unavailable('the document took too long to render', 5);
        throw e;
      });
    return { pdf, name: d.name };
  }

  /** The document as one HTML page for a share link; images under `<assetBase>/<fileId>`. */
  async shareHtml(ownerId: string, id: string, assetBase: string, pdfUrl: string): Promise<string> {
    const d = await this.deps.repo.owned(ownerId, id);
    if (!d) throw errors.notFound('document');
    const link = `<link rel="alternate" type="application/pdf" href="${pdfUrl.replace(/"/g, '&quot;')}">`;
    return documentHtml(
      renderable(d),
      d.sections,
      (fileId) => `${assetBase}/${encodeURIComponent(fileId)}`,
      link,
    );
  }

  /** An image of a shared document, when the document really shows that file (its bytes as a stream). */
  async shareAsset(ownerId: string, id: string, fileId: string) {
    const d = await this.deps.repo.owned(ownerId, id);
    if (!d || !imageFileIds(d.sections).includes(fileId)) return null;
    const opened = await this.deps.files.open({ scheme: 'share', ownerId, plan: 'byte' }, fileId).catch(() => undefined);
    return opened ? { body: opened.stream, contentType: opened.row.content_type } : null;
  }

  get browser(): Browser {
    return this.deps.browser;
  }

  async close(): Promise<void> {
    await this.deps.browser.close();
  }

  /** Exists and is the caller's (share tokens are made for documents that exist). */
  async assertOwned(p: Principal, id: string): Promise<void> {
    await this.owned(p, id);
  }

  private pages(d: DocumentRow, imageSrc: ImageSrc) {
    const doc = renderable(d);
    return d.sections.map((s, index) => ({
      id: pageId(s.id),
      index,
      sectionId: s.id,
      title: s.heading ?? null,
      html: documentHtml(doc, [s], imageSrc),
    }));
  }

  /** Images as fresh read URLs (1 h) for pages handed to the owner; a file gone shows as a missing image. */
  private async readUrls(p: Principal, sections: StoredSection[]): Promise<ImageSrc> {
    const urls = new Map<string, string>();
    for (const fileId of imageFileIds(sections)) {
      const file = await this.deps.files.get(p, fileId).catch(() => undefined);
      if (file?.readUrl) urls.set(fileId, file.readUrl);
    }
    return (fileId) => urls.get(fileId) ?? assetPath(fileId);
  }

  /** A file's bytes as they are read; the file is opened when they are first asked for. */
  private async *fileChunks(p: Principal, fileId: string): AsyncGenerator<Buffer> {
    yield* (await this.deps.files.open(p, fileId)).stream;
  }

  private async fileBytes(p: Principal, fileId: string) {
    const opened = await this.deps.files.open(p, fileId).catch(() => undefined);
    if (!opened) return null;
    if (opened.row.size > PDF_IMAGE_BYTES) {
      opened.stream.destroy();
      return null;
    }
    const parts: Buffer[] = [];
    for await (const c of opened.stream) parts.push(c as Buffer);
    return { body: Buffer.concat(parts), contentType: opened.row.content_type };
  }

  private async owned(p: Principal, id: string): Promise<DocumentRow> {
    const d = await this.deps.repo.owned(p.ownerId, id);
    if (!d || !this.deps.workspaces.sees(p, d.workspaceId)) throw errors.notFound('document');
    return d;
  }

  /**
   * Whether the pages come from the prompt: a prompt and no sections. Then an LLM must serve the owner
   * (400 naming the setting otherwise) and the plan must have tokens left (402), checked before
   * anything is stored so the caller learns it at once rather than from a failed generation.
   */
  private async wantsGeneration(p: Principal, prompt?: string, sections?: SectionInput[]): Promise<boolean> {
    if ((sections !== undefined && sections.length > 0) || !prompt?.trim()) return false;
    if (!this.deps.pageWriter) throw llmNotConfigured();
    await this.deps.pageWriter.assertReady(p.ownerId, p.plan);
    await this.deps.usage.assertKeyCaps(p, ['llmTokens']);
    return true;
  }

  private async enqueueGeneration(p: Principal, d: DocumentRow, generationId: string, db: Kysely<Tables>): Promise<void> {
    // The key that asked is carried to where the tokens are metered (its llmTokens cap).
    const keyId = capKeyId(p);
    const job: GenerateJob = { documentId: d.id, ownerId: d.ownerId, generationId, ...(keyId ? { keyId } : {}) };
    // One pending generation per document: a newer prompt re-arms the queued job (or replaces a running one).
    await this.deps.jobs.enqueue(GENERATE_JOB, job, {
      key: generateJobKey(d.id),
      onDuplicate: 'replace',
      db,
    });
  }

  /** Sections as stored; image files must be the caller's. */
  private async sectionsOf(p: Principal, sections: SectionInput[] = []): Promise<StoredSection[]> {
    const stored = normalizeSections(sections);
    const issues: { path: (string | number)[]; message: string }[] = [];
    for (const [i, s] of stored.entries()) {
      for (const [j, img] of (s.images ?? []).entries()) {
        if (!img.fileId) continue;
        const ok = await this.deps.files.doneRow(p, img.fileId).then(
          () => true,
          () => false,
        );
        if (!ok)
          issues.push({
            path: ['body', 'sections', i, 'images', j, 'fileId'],
            message: `no file ${img.fileId} of yours`,
          });
      }
    }
    if (issues.length > 0)
      throw errors.badRequest('an image names a file you do not have', issues, 'ImageNotFound');
    return stored;
  }
}

function noPages(d: DocumentRow) {
  const g = d.generation;
  const why =
    g?.status === 'queued' || g?.status === 'running'
      ? 'its pages are still being written from the prompt (see generation.status)'
      : g?.status === 'failed'
        ? `writing its pages from the prompt failed (${g.error ?? 'no reason given'}); send sections, or PATCH with sections: [] to try again`
        : 'add sections first';
  return errors.badRequest(`the document has no page yet: ${why}`, undefined, 'DocumentHasNoPages');
}

function renderable(d: DocumentRow): RenderDoc {
  const lang =
    typeof d.metadata.lang === 'string' && /^[a-zA-Z-]{2,20}$/.test(d.metadata.lang)
      ? d.metadata.lang
      : undefined;
  return { name: d.name, theme: d.theme, customColors: d.customColors, sections: d.sections, lang };
}

function formatOf(d: DocumentRow): PdfFormat {
  return (typeof d.metadata.format === 'string' ? d.metadata.format : 'A4') as PdfFormat;
}

/** `attachment` (or `inline`) with an ASCII fallback name and the real one in RFC 5987 form. */
export function contentDisposition(name: string, inline: boolean): string {
  const base = name.trim() || 'document';
  const ascii =
    base
      .normalize('NFKD')
      .replace(/[\u0300-\u036f]/g, '')
      .replace(/[^A-Za-z0-9._ -]+/g, '')
      .trim()
      .slice(0, 100) || 'document';
  return `${inline ? 'inline' : 'attachment'}; filename="${ascii}.pdf"; filename*=UTF-8''${encodeURIComponent(`${base}.pdf`)}`;
}
