import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { FastifyInstance } from 'fastify';
import { withBadge } from './badge.js';
import type { Manifest } from './repo.js';
import { formPageSize, withFormActions } from './site-forms.js';
import { type LiveSite, type WebsitesService, websiteKey } from './service.js';

// The host router: a request whose Host is `<slug>.<sites host>` is a visit to a published site, not an
// API call. It runs in an onRequest hook, like the sandbox port proxy, and writes the answer on the raw
// response: sites are the hottest read path nube has.

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** `/f/<form>` (a trailing slash and a query allowed): where a site's forms post. */
const FORM_PATH = /^\/f\/([^/?#]+)\/?(?:\?.*)?$/;

/** Files up to this size are kept in memory by content hash (immutable, so never stale). */
const CACHE_FILE_BYTES = 1024 * 1024;
const CACHE_TOTAL_BYTES = 64 * 1024 * 1024;

interface Hit {
  status: number;
  path: string;
  entry: Manifest[string];
}

/** Which manifest entry answers `urlPath`: the file, `dir/index.html`, `name.html`, else 404.html. */
export function route(manifest: Manifest, urlPath: string): Hit | { redirect: string } | null {
  let path: string;
  try {
    path = decodeURIComponent(urlPath).replace(/^\/+/, '');
  } catch {
    return null;
  }
  const exact = path === '' || path.endsWith('/') ? `${path}index.html` : path;
  if (manifest[exact]) return { status: 200, path: exact, entry: manifest[exact] };
  // A folder asked without its slash: redirect so relative links inside its index resolve.
  if (manifest[`${path}/index.html`]) return { redirect: `/${encodeURI(path)}/` };
  if (manifest[`${path}.html`]) return { status: 200, path: `${path}.html`, entry: manifest[`${path}.html`] };
  if (manifest['404.html']) return { status: 404, path: '404.html', entry: manifest['404.html'] };
  return null;
}

const NOT_FOUND_PAGE = Buffer.from(
  '<!doctype html><html><head><meta charset="utf-8"><title>Not found</title></head>' +
    '<body style="font-family:system-ui,sans-serif;text-align:center;padding:4rem">' +
    '<h1>404</h1><p>There is no page here.</p></body></html>',
);

export class SiteServer {
  private readonly hostRe: RegExp;
  private readonly cache = new Map<string, Buffer>();
  private cachedBytes = 0;

  constructor(
    private readonly sites: WebsitesService,
    /** The site id a verified custom domain in a Host header serves, or null (the domains area's routes). */
    private readonly domainSite: (host: string | undefined) => string | null = () => null,
  ) {
    this.hostRe = new RegExp(
      `^([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\\.${escapeRe(sites.deps.sitesHost)}(?::\\d+)?$`,
      'i',
    );
  }

  /** The slug when the Host names a site, else null (an API request). */
  match(host: string | undefined): string | null {
    const m = host ? this.hostRe.exec(host) : null;
    return m ? m[1]!.toLowerCase() : null;
  }

  install(app: FastifyInstance): void {
    // A callback hook: every API request passes here and only site hosts wait on anything.
    app.addHook('onRequest', (req, reply, done) => {
      const slug = this.match(req.headers.host);
      const siteId = slug === null ? this.domainSite(req.headers.host) : null;
      if (slug === null && siteId === null) return done();
      reply.hijack();
      const res = reply.raw;
      const visit = async () => {
        const s = slug ?? (await this.sites.slugOf(siteId!));
        if (s === null) return plain(res, 404, 'no site here');
        const form = req.method === 'POST' ? FORM_PATH.exec(req.url)?.[1] : undefined;
        if (form !== undefined && this.sites.formPosts)
          return this.sites.formPosts({ slug: s, form, req: req.raw, res, ip: req.ip });
        await this.serve(s, req.method, req.url, req.headers['if-none-match'], res);
      };
      visit().catch((err) => {
        req.log.error({ err, slug }, 'site request failed');
        if (!res.headersSent) plain(res, 500, 'internal error');
        else res.destroy();
      });
    });
  }

  private async serve(
    slug: string,
    method: string,
    url: string,
    ifNoneMatch: string | undefined,
    res: ServerResponse,
  ): Promise<void> {
    if (method !== 'GET' && method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' });
      res.end('method not allowed');
      return;
    }
    const live = await this.sites.liveSite(slug);
    const q = url.indexOf('?');
    const hit = live ? route(live.site.manifest, q === -1 ? url : url.slice(0, q)) : null;
    if (hit && 'redirect' in hit) {
      res.writeHead(301, { location: hit.redirect, 'content-length': 0 });
      res.end();
      return;
    }
    if (!live || !hit) {
      send(
        res,
        method,
        404,
        { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-cache' },
        NOT_FOUND_PAGE,
      );
      return;
    }
    const [sha, size, contentType] = hit.entry;
    const html = contentType.startsWith('text/html');
    const badge = html && live.branded;
    // Pages of a site with forms get nube's action on their forms (the same bytes for the same hash).
    const forms = html && live.site.forms.length > 0 && formPageSize(size);
    const etag = `"${sha.slice(0, 32)}${badge ? '-b' : ''}${forms ? '-f' : ''}"`;
    const headers: Record<string, string> = {
      'content-type': contentType,
      etag,
      // Pages revalidate every time (a redeploy shows at once); other files may be reused for a minute.
      'cache-control': html ? 'no-cache' : 'public, max-age=60',
      'x-content-type-options': 'nosniff',
    };
    if (hit.status === 200 && ifNoneMatch !== undefined && matches(ifNoneMatch, etag)) {
      res.writeHead(304, headers);
      res.end();
      return;
    }
    if (size > CACHE_FILE_BYTES && !badge && !forms) {
      // Large files (media, archives) stream from the store: never a whole copy in memory per request.
      const got = await this.sites.deps.store.get(websiteKey(live.site.id, sha));
      res.writeHead(hit.status, { ...headers, 'content-length': got.contentLength });
      if (method === 'HEAD') {
        got.stream.destroy();
        res.end();
        return;
      }
      await pipeline(got.stream, res).catch(() => {
        // The visitor went away mid-download; pipeline closed both ends.
      });
      return;
    }
    let body = await this.bytes(live, sha);
    if (forms) body = this.transformed(`${sha}-f`, body, withFormActions);
    if (badge) body = withBadge(body);
    send(res, method, hit.status, headers, body);
  }

  private async bytes(live: LiveSite, sha: string): Promise<Buffer> {
    const cached = this.cached(sha);
    if (cached) return cached;
    const got = await this.sites.deps.store.get(websiteKey(live.site.id, sha));
    const parts: Buffer[] = [];
    for await (const c of got.stream) parts.push(c as Buffer);
    const body = Buffer.concat(parts);
    this.keep(sha, body);
    return body;
  }

  /** `change(body)`, kept under `key` (derived from the content hash, so never stale). */
  private transformed(key: string, body: Buffer, change: (b: Buffer) => Buffer): Buffer {
    const cached = this.cached(key);
    if (cached) return cached;
    const out = change(body);
    this.keep(key, out);
    return out;
  }

  private cached(key: string): Buffer | undefined {
    const hit = this.cache.get(key);
    if (hit) {
      // Map order is recency order: a hit moves to the back, eviction takes from the front.
      this.cache.delete(key);
      this.cache.set(key, hit);
    }
    return hit;
  }

  private keep(key: string, body: Buffer): void {
    if (body.length > CACHE_FILE_BYTES) return;
    this.cache.set(key, body);
    this.cachedBytes += body.length;
    for (const [k, v] of this.cache) {
      if (this.cachedBytes <= CACHE_TOTAL_BYTES) break;
      this.cache.delete(k);
      this.cachedBytes -= v.length;
    }
  }
}

function matches(header: string, etag: string): boolean {
  if (header.trim() === '*') return true;
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === etag);
}

function send(
  res: ServerResponse,
  method: string,
  status: number,
  headers: Record<string, string>,
  body: Buffer,
): void {
  res.writeHead(status, { ...headers, 'content-length': body.length });
  res.end(method === 'HEAD' ? undefined : body);
}

function plain(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
  res.end(text);
}
