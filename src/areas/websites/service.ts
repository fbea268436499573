import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import { Readable } from 'node:stream';
import type { BlobStore } from '../../blob/index.js';
import type { PlanName } from '../../platform/plans.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { Outbox, OutboxEvent } from '../../platform/outbox.js';
import { assertStorageAvailable } from '../../platform/limits.js';
import { PLANS } from '../../platform/plans.js';
import type { Spool } from '../../platform/spool.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { FilesService } from '../files/service.js';
import { unpackSite } from './archive.js';
import type { Manifest, WebsiteRow, WebsitesRepo, WebsiteWithManifest } from './repo.js';
import { contentTypeOf, entryOf, SITE_LIMITS, type SiteEntry, type SiteFile } from './site-files.js';
import { declaredForms } from './site-forms.js';
import { RESERVED_SLUGS, SLUG_PATTERN, slugFrom } from './slug.js';

export interface WebsitesDeps {
  repo: WebsitesRepo;
  /** Where site files live, by content hash: `sites/<website id>/<sha256>`. */
  store: BlobStore;
  files: FilesService;
  /** Where archives and their unpacked files wait on disk while a request publishes them. */
  spool: Spool;
  events: Outbox;
  planOf(ownerId: string): Promise<PlanName>;
  /** Everything the owner stores (files and sites): sites count against the plan's storage. */
  storageUsed(ownerId: string): Promise<number>;
  workspaces: WorkspaceRegistry;
  publicUrl(): string;
  /** Sites answer at `<slug>.<sitesHost>`. */
  sitesHost: string;
  /** The site id a verified custom domain (a host name) serves, or null (the domains area's routes). */
  domainSite?(host: string): string | null;
}

/** A visitor's POST to a site's form (`/f/<form>` on the site's host): handled by the forms area. */
export interface FormPost {
  slug: string;
  form: string;
  req: import('node:http').IncomingMessage;
  res: import('node:http').ServerResponse;
  /** The client's address as the platform sees it (trusted proxies applied). */
  ip: string;
}

export interface ArchiveInput {
  fileId?: string;
  archiveBase64?: string;
}

/** What the host router needs to answer a request for a site, cached for a moment per slug. */
export interface LiveSite {
  site: WebsiteWithManifest;
  /** Byte's pages carry the "made with nube" badge. */
  branded: boolean;
}

/**
 * How long a replica trusts what it read about a slug. The replica that deploys or deletes forgets at
 * once; the others see the change within this time.
 */
export const LIVE_TTL_MS = 1_000;

export const websiteKey = (websiteId: string, sha256: string) => `sites/${websiteId}/${sha256}`;

export class WebsitesService {
  private readonly live = new Map<string, { value: LiveSite | null; expires: number }>();
  private readonly deletedListeners: ((site: WebsiteRow) => Promise<void>)[] = [];
  /** Who answers a POST to `/f/<form>` on a site's host (the forms area); none: 404. */
  formPosts: ((post: FormPost) => Promise<void>) | undefined;

  constructor(readonly deps: WebsitesDeps) {}

  siteUrl(slug: string): string {
    const base = new URL(this.deps.publicUrl());
    return `${base.protocol}//${slug}.${this.deps.sitesHost}${base.port ? `:${base.port}` : ''}`;
  }

  view(r: WebsiteRow) {
    return {
      id: r.id,
      name: r.name,
      slug: r.slug,
      url: this.siteUrl(r.slug),
      source: r.source,
      documentId: r.documentId,
      fileCount: r.fileCount,
      totalBytes: r.totalBytes,
      forms: r.forms,
      createdAt: new Date(r.createdAt).toISOString(),
      updatedAt: new Date(r.updatedAt).toISOString(),
      workspaceId: r.workspaceId,
    };
  }

  /** Another area (documents) learns when a site it made is deleted through /websites. */
  onDeleted(listener: (site: WebsiteRow) => Promise<void>): void {
    this.deletedListeners.push(listener);
  }

  async create(p: Principal, input: ArchiveInput & { name?: string; slug?: string; workspaceId?: string }) {
    const workspaceId = await this.deps.workspaces.forCreate(p, input.workspaceId);
    const plan = PLANS[p.plan];
    if (!plan.includes.staticWebsites) {
      throw errors.paymentRequired(
        `publishing static sites is included in the Mega and Tera plans, not in ${plan.title}; documents can still be deployed as sites`,
        'PlanUpgradeRequired',
      );
    }
    if (input.slug !== undefined) checkSlug(input.slug);
    const site = await this.withArchive(p, input, (files) =>
      this.insert(
        p,
        { name: input.name ?? input.slug ?? 'site', slug: input.slug, source: 'archive', documentId: null, workspaceId },
        files,
      ),
    );
    return this.view(site);
  }

  async deploy(p: Principal, id: string, input: ArchiveInput) {
    const site = await this.owned(p, id);
    if (site.source === 'document') {
      throw errors.conflict(
        'this site shows a document: deploy the document instead',
        'WebsiteManagedByDocument',
      );
    }
    return this.view(await this.withArchive(p, input, (files) => this.replace(p, site, files)));
  }

  async list(p: Principal, workspaceId?: string) {
    const ws = await this.deps.workspaces.filter(p, workspaceId);
    return { items: (await this.deps.repo.list(p.ownerId, ws)).map((r) => this.view(r)) };
  }

  async get(p: Principal, id: string) {
    return this.view(await this.owned(p, id));
  }

  async delete(p: Principal, id: string): Promise<void> {
    const site = await this.owned(p, id);
    const gone = await this.deps.events.atomically(async (trx, emit) => {
      const ok = await this.deps.repo.delete(p.ownerId, id, trx);
      if (ok) emit(this.event('website.deleted', site));
      return ok;
    });
    if (!gone) throw errors.notFound('website');
    this.forget(site.slug);
    for (const listener of this.deletedListeners) await listener(site);
    // After the row is gone nothing serves these; a crash here leaves orphans, never a broken site.
    for await (const entry of this.deps.store.list(`sites/${site.id}/`))
      await this.deps.store.delete(entry.key);
  }

  /**
   * Publishes a document's pages: updates the document's site when it still exists, else creates one
   * at `slug` (or a fresh slug when that one was taken meanwhile).
   */
  async publishDocument(
    p: Principal,
    doc: { documentId: string; name: string; websiteId: string | null; slug: string; workspaceId: string },
    files: (SiteFile | SiteEntry)[],
  ) {
    const entries = files.map((f) => ('data' in f ? entryOf(f) : f));
    const current = doc.websiteId ? await this.deps.repo.owned(p.ownerId, doc.websiteId) : undefined;
    if (current) return this.view(await this.replace(p, current, entries, doc.name));
    const slug = (await this.deps.repo.slugTaken(doc.slug)) ? slugFrom(doc.name) : doc.slug;
    return this.view(
      await this.insert(p, { name: doc.name, slug, source: 'document', documentId: doc.documentId, workspaceId: doc.workspaceId }, entries),
    );
  }

  /** Removes a document's site (unpublish, document deleted); nothing when it is already gone. */
  async removeDocumentSite(p: Principal, websiteId: string): Promise<void> {
    await this.delete(p, websiteId).catch((e) => {
      if ((e as { status?: number }).status !== 404) throw e;
    });
  }

  /** A site's slug by id (slugs never change), for custom domains; null once the site is gone. */
  async slugOf(id: string): Promise<string | null> {
    const hit = this.slugs.get(id);
    if (hit !== undefined) return hit;
    const slug = await this.deps.repo.slugOf(id);
    if (slug !== null) {
      if (this.slugs.size > 10_000) this.slugs.clear();
      this.slugs.set(id, slug);
    }
    return slug;
  }
  private readonly slugs = new Map<string, string>();

  /** The site at `slug` for the host router, or null; cached for LIVE_TTL_MS. */
  async liveSite(slug: string): Promise<LiveSite | null> {
    const hit = this.live.get(slug);
    const now = Date.now();
    if (hit && hit.expires > now) return hit.value;
    const site = await this.deps.repo.bySlug(slug);
    const value = site
      ? { site, branded: PLANS[await this.deps.planOf(site.ownerId)].includes.branding }
      : null;
    if (this.live.size > 10_000) this.live.clear();
    this.live.set(slug, { value, expires: now + LIVE_TTL_MS });
    return value;
  }

  /**
   * Whether a browser `Origin` (scheme://host[:port]) is one of the site's own: its slug host, or a
   * verified custom domain pointed at it. Forms take cross-origin posts only from these.
   */
  isSiteOrigin(site: { id: string; slug: string }, origin: string): boolean {
    let u: URL;
    try {
      u = new URL(origin);
    } catch {
      return false;
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.origin !== origin.replace(/\/$/, ''))
      return false;
    const host = u.hostname.toLowerCase();
    if (host === `${site.slug}.${this.deps.sitesHost}`) return true;
    return this.deps.domainSite?.(host) === site.id;
  }

  private forget(slug: string): void {
    this.live.delete(slug);
  }

  private async owned(p: Principal, id: string): Promise<WebsiteWithManifest> {
    const site = await this.deps.repo.owned(p.ownerId, id);
    if (!site || !this.deps.workspaces.sees(p, site.workspaceId)) throw errors.notFound('website');
    return site;
  }

  /**
   * Spools the archive to disk (a file of the owner's, or the bytes given), unpacks it into a scratch
   * directory and hands its files to `use`; the spool and the scratch directory are gone afterwards,
   * whatever happened.
   */
  private async withArchive<T>(
    p: Principal,
    input: ArchiveInput,
    use: (files: SiteEntry[]) => Promise<T>,
  ): Promise<T> {
    if ((input.fileId === undefined) === (input.archiveBase64 === undefined)) {
      throw errors.validation([
        { path: ['body', 'fileId'], message: 'give exactly one of fileId or archiveBase64' },
      ]);
    }
    const archiveTooLarge = () =>
      errors.badRequest(
        `archives up to ${SITE_LIMITS.archiveBytes} bytes (${SITE_LIMITS.archiveBytes / 2 ** 20} MB)`,
        undefined,
        'InvalidArchive',
      );
    let body: Readable;
    if (input.fileId !== undefined) {
      const row = await this.deps.files.doneRow(p, input.fileId);
      if (row.size > SITE_LIMITS.archiveBytes) throw archiveTooLarge();
      body = (await this.deps.files.open(p, input.fileId)).stream;
    } else body = Readable.from([Buffer.from(input.archiveBase64 as string, 'base64')]);
    const archive = await this.deps.spool.take(body, SITE_LIMITS.archiveBytes, archiveTooLarge);
    const scratch = await this.deps.spool.scratch().catch(async (e) => {
      await archive.remove();
      throw e;
    });
    try {
      return await use(await unpackSite(archive, scratch));
    } finally {
      await archive.remove();
      await scratch.remove();
    }
  }

  private async insert(
    p: Principal,
    meta: { name: string; slug?: string; source: 'archive' | 'document'; documentId: string | null; workspaceId: string },
    files: SiteEntry[],
  ): Promise<WebsiteRow> {
    const slug = meta.slug ?? slugFrom(meta.name);
    if (meta.slug !== undefined && (await this.deps.repo.slugTaken(slug))) throw slugTaken(slug);
    const id = newId('web');
    assertStorageAvailable(p.plan, await this.deps.storageUsed(p.ownerId), bytesOf(files));
    const now = Date.now();
    const forms = await declaredForms(files);
    const row: WebsiteRow = {
      id,
      ownerId: p.ownerId,
      name: meta.name,
      slug,
      source: meta.source,
      documentId: meta.documentId,
      fileCount: files.length,
      totalBytes: bytesOf(files),
      version: 1,
      forms,
      createdAt: now,
      updatedAt: now,
      workspaceId: meta.workspaceId,
    };
    try {
      const manifest = await this.store(id, files, {});
      await this.deps.events.atomically(async (trx, emit) => {
        await this.deps.repo.insert(row, manifest, trx);
        emit(this.event('website.created', row));
      });
    } catch (e) {
      for await (const entry of this.deps.store.list(`sites/${id}/`)) await this.deps.store.delete(entry.key);
      if (isUniqueViolation(e)) throw slugTaken(slug);
      throw e;
    }
    this.forget(slug);
    return row;
  }

  private async replace(
    p: Principal,
    site: WebsiteWithManifest,
    files: SiteEntry[],
    name?: string,
  ): Promise<WebsiteRow> {
    // The new version replaces the old one's bytes.
    assertStorageAvailable(
      p.plan,
      (await this.deps.storageUsed(p.ownerId)) - site.totalBytes,
      bytesOf(files),
    );
    const manifest = await this.store(site.id, files, site.manifest);
    const set = {
      fileCount: files.length,
      totalBytes: bytesOf(files),
      forms: await declaredForms(files),
      updatedAt: Date.now(),
    };
    if (!(await this.deps.repo.replaceContent(site.id, site.version, manifest, { ...set, name }))) {
      throw errors.conflict(
        'the site was deployed by another request meanwhile; try again',
        'WebsiteChanged',
      );
    }
    this.forget(site.slug);
    // Contents the new version no longer uses; shared hashes stay.
    const kept = new Set(Object.values(manifest).map(([sha]) => sha));
    for (const sha of new Set(Object.values(site.manifest).map(([s]) => s))) {
      if (!kept.has(sha)) await this.deps.store.delete(websiteKey(site.id, sha));
    }
    return { ...site, name: name ?? site.name, ...set, version: site.version + 1 };
  }

  /** Writes the contents the site does not hold yet (by hash) and returns the new manifest. */
  private async store(websiteId: string, files: SiteEntry[], existing: Manifest): Promise<Manifest> {
    const have = new Set(Object.values(existing).map(([sha]) => sha));
    const manifest: Manifest = {};
    const toWrite = new Map<string, SiteEntry>();
    for (const f of files) {
      manifest[f.path] = [f.sha256, f.size, f.contentType ?? contentTypeOf(f.path)];
      if (!have.has(f.sha256)) toWrite.set(f.sha256, f);
    }
    const queue = [...toWrite.entries()];
    const worker = async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const [sha, f] = next;
        await this.deps.store.put(websiteKey(websiteId, sha), f.open(), {
          contentType: f.contentType ?? contentTypeOf(f.path),
          expectedSize: f.size,
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, worker));
    return manifest;
  }

  /** Website events, recorded in the commit of the change they report. */
  private event(event: 'website.created' | 'website.deleted', site: WebsiteRow): OutboxEvent {
    return { event, ownerId: site.ownerId, data: this.view(site) as unknown as Record<string, unknown> };
  }
}

function checkSlug(slug: string): void {
  if (!SLUG_PATTERN.test(slug) || RESERVED_SLUGS.has(slug)) {
    throw errors.validation([
      {
        path: ['body', 'slug'],
        message: 'lowercase letters, digits and inner hyphens, 1-63 characters, not a reserved name',
      },
    ]);
  }
}

const slugTaken = (slug: string) => errors.conflict(`the slug "${slug}" is taken`, 'SlugTaken');

const bytesOf = (files: SiteEntry[]) => files.reduce((n, f) => n + f.size, 0);
