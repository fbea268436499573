// Visitors' submissions, outside the registry: `POST /f/<form>` on a site's own host (routed here by the
// websites area's host router) and `POST /f/<slug>/<form>` on nube's host (for pages elsewhere, with
// CORS for the site's own origins only). Answers: JSON when asked (`Accept: application/json`), else a
// 303 to `_redirect` when it is on the site's own origin, or to nube's thank-you page.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { RateLimiter } from '../../platform/limits.js';
import type { FormPost, WebsitesService } from '../websites/service.js';
import { readSubmission } from './body.js';
import { FORM_NAME } from '../websites/site-forms.js';
import { type FormsService, type FormTarget, REDIRECT_FIELD } from './service.js';

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** The path of nube's own thank-you page (on nube's host). */
export const THANKS_PATH = '/f/thanks';

function page(title: string, body: string): string {
  return (
    `<!doctype html><html lang="en"><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${esc(title)}</title>` +
    `<body style="font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem">${body}</body></html>`
  );
}

const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
};

export class FormEndpoint {
  constructor(
    private readonly forms: FormsService,
    private readonly websites: WebsitesService,
    private readonly limiter: RateLimiter,
    private readonly perMinute: number,
    private readonly publicUrl: () => string,
  ) {}

  /** The CORS headers for `origin` when it is one of the site's own, else null. */
  private cors(t: FormTarget, origin: string | undefined): Record<string, string> | null {
    if (origin === undefined) return {};
    if (!this.websites.isSiteOrigin({ id: t.websiteId, slug: t.slug }, origin)) return null;
    return { 'access-control-allow-origin': origin, vary: 'Origin' };
  }

  async handle(post: FormPost): Promise<void> {
    const { req, res } = post;
    const json = /application\/json/i.test(String(req.headers.accept ?? ''));
    let cors: Record<string, string> = {};
    try {
      const limited = await this.limiter.consume(`forms:${post.ip}`, {
        points: this.perMinute,
        windowSeconds: 60,
      });
      if (!limited.allowed)
        throw new ApiError(
          429,
          'RateLimited',
          'too many submissions from your address; try again in a minute',
          { retryAfter: limited.retryAfterSec },
          { 'retry-after': String(limited.retryAfterSec) },
        );
      if (!FORM_NAME.test(post.form) || !SLUG.test(post.slug))
        throw new ApiError(404, 'NotFound', 'no such form');
      const t = await this.forms.target(post.slug, post.form);
      const allowed = this.cors(t, origin(req));
      if (!allowed)
        throw new ApiError(
          403,
          'ForbiddenOrigin',
          "this form takes submissions only from its site's own pages",
        );
      cors = allowed;
      const submission = await readSubmission(req);
      const out = (await this.forms.submit(t, submission)) ?? {
        // The honeypot was filled: the same answer, nothing stored.
        formId: newId('frm'),
        submissionId: newId('fsub'),
      };
      if (json)
        return send(
          res,
          200,
          { ...cors, 'content-type': 'application/json' },
          JSON.stringify({ ok: true, ...out }),
        );
      const back = submission.fields[REDIRECT_FIELD];
      const to =
        typeof back === 'string' && this.ownUrl(t, back)
          ? back
          : `${this.publicUrl().replace(/\/$/, '')}${THANKS_PATH}?site=${encodeURIComponent(t.slug)}`;
      return send(res, 303, { ...cors, location: to, 'content-length': '0' }, '');
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      const headers = { ...cors, ...e.headers };
      if (json)
        return send(
          res,
          e.status,
          { ...headers, 'content-type': 'application/json' },
          JSON.stringify(e.toBody()),
        );
      return send(
        res,
        e.status,
        { ...headers, ...PAGE_HEADERS },
        page('Form', `<h1>Not sent</h1><p>${esc(e.message)}.</p>`),
      );
    }
  }

  /** `_redirect` is followed only to the site's own origins (never an open redirect). */
  private ownUrl(t: FormTarget, url: string): boolean {
    try {
      const u = new URL(url);
      return this.websites.isSiteOrigin({ id: t.websiteId, slug: t.slug }, u.origin);
    } catch {
      return false;
    }
  }

  /** A preflight (a script posting JSON): allowed for the site's own origins only. */
  async preflight(slug: string, form: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t =
      FORM_NAME.test(form) && SLUG.test(slug) ? await this.forms.target(slug, form).catch(() => null) : null;
    const allowed = t && origin(req) !== undefined ? this.cors(t, origin(req)) : null;
    if (!allowed)
      return send(res, 403, { 'content-type': 'text/plain; charset=utf-8' }, 'origin not allowed');
    send(
      res,
      204,
      {
        ...allowed,
        'access-control-allow-methods': 'POST',
        'access-control-allow-headers': 'content-type, accept',
        'access-control-max-age': '600',
      },
      '',
    );
  }

  thanks(slug: string | undefined): string {
    const back =
      slug && SLUG.test(slug)
        ? `<p><a href="${esc(this.websites.siteUrl(slug))}">Back to the site</a></p>`
        : '';
    return page('Thank you', `<h1>Thank you</h1><p>Your message was sent.</p>${back}`);
  }

  install(app: FastifyInstance): void {
    app.get<{ Querystring: { site?: string } }>(THANKS_PATH, (req, reply) =>
      reply.code(200).headers(PAGE_HEADERS).send(this.thanks(req.query.site)),
    );
    void app.register(async (scope) => {
      // The body is read from the raw request with the forms' own limits (body.ts).
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_req, _payload, done) => done(null));
      scope.post<{ Params: { slug: string; form: string } }>('/f/:slug/:form', async (req, reply) => {
        reply.hijack();
        await this.handle({
          slug: req.params.slug,
          form: req.params.form,
          req: req.raw,
          res: reply.raw,
          ip: req.ip,
        }).catch((err) => {
          req.log.error({ err }, 'form submission failed');
          if (!reply.raw.headersSent)
            send(
              reply.raw,
              500,
              { 'content-type': 'application/json' },
              '{"error":"internal error","code":"InternalError"}',
            );
        });
      });
      scope.options<{ Params: { slug: string; form: string } }>('/f/:slug/:form', async (req, reply) => {
        reply.hijack();
        await this.preflight(req.params.slug, req.params.form, req.raw, reply.raw);
      });
    });
  }
}

function origin(req: IncomingMessage): string | undefined {
  const o = req.headers.origin;
  return typeof o === 'string' && o !== '' ? o : undefined;
}

function send(res: ServerResponse, status: number, headers: Record<string, string>, body: string): void {
  res.writeHead(status, { ...headers, 'content-length': String(Buffer.byteLength(body)) });
  res.end(body);
}
