import type { PlanName } from '../../platform/plans.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, type ErrorIssue, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { JobQueue } from '../../platform/jobs.js';
import { PLANS } from '../../platform/plans.js';
import type { Usage } from '../../platform/usage.js';
import type { Kysely } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { type FetchedPage, isHtml, type PageFetcher } from './fetcher.js';
import type { ParsedPage } from './html.js';
import type { ParserPool } from './parser-pool.js';
import { type ExtractJobRow, WebRepo } from './repo.js';
import { NO_RULES, parseRobots, type RobotsRules, robotsAllows } from './robots.js';
import type { SearchProvider } from './search-provider.js';

/** Pages a crawl fetches at once. */
const CRAWL_CONCURRENCY = 4;
/** A crawl starts no new batch after this long; the pages fetched so far are returned. */
export const CRAWL_DEADLINE_MS = 60_000;

export interface WebPageView {
  url: string;
  requestedUrl: string;
  status: number;
  contentType: string | null;
  title: string | null;
  description: string | null;
  format: 'markdown' | 'html' | 'text';
  markdown?: string;
  html?: string;
  text?: string;
  links?: string[];
  truncated: boolean;
  fetchedAt: string;
}

interface Metered {
  queriesUsed: number;
  queriesRemaining: number | null;
}

export const EXTRACT_JOB = 'web.extract';
/** URLs one extraction job takes. */
export const MAX_EXTRACT_URLS = 50;
export const EXTRACT_SOURCES = ['page'] as const;

export interface ExtractJob {
  jobId: string;
  ownerId: string;
  plan: PlanName;
}

export interface ExtractInput {
  input?: unknown;
  source?: string;
  datasetId?: string;
  limit?: number;
}

/** The URLs an extraction input names: a URL, an array of URLs, or `{ url }` / `{ urls }`; else 400. */
export function extractUrls(input: unknown): string[] {
  const o = input as { url?: unknown; urls?: unknown } | null;
  const list =
    typeof input === 'string' ? [input] : Array.isArray(input) ? input : o && typeof o === 'object' ? (o.urls ?? (o.url === undefined ? undefined : [o.url])) : undefined;
  const shape = 'source page takes a URL, an array of URLs, or { url } / { urls }';
  if (!Array.isArray(list) || list.length === 0) throw errors.validation([{ path: ['body', 'input'], message: shape }]);
  if (list.length > MAX_EXTRACT_URLS) {
    throw errors.validation([{ path: ['body', 'input'], message: `at most ${MAX_EXTRACT_URLS} URLs per job` }]);
  }
  const issues: ErrorIssue[] = [];
  const urls = list.map((u, i) => {
    let ok = false;
    try {
      ok = typeof u === 'string' && /^https?:$/.test(new URL(u).protocol);
    } catch {
      ok = false;
    }
    if (!ok) issues.push({ path: ['body', 'input', i], message: 'not an http(s) URL' });
    return String(u);
  });
  if (issues.length) throw errors.validation(issues);
  return urls;
}

export interface CrawlInput {
  url: string;
  maxPages: number;
  signal?: AbortSignal;
}

export class WebService {
  private readonly repo: WebRepo;

  constructor(
    private readonly fetcher: PageFetcher,
    private readonly search_: SearchProvider | undefined,
    private readonly usage: Usage,
    private readonly buyUrl: () => string,
    private readonly db: Kysely<Tables>,
    private readonly jobs: JobQueue,
    private readonly parser: ParserPool,
  ) {
    this.repo = new WebRepo(db);
  }

  /** Queries left this month: web queries share the plan's AI credits with AI use (as account usage shows). */
  async remaining(p: Pick<Principal, 'ownerId' | 'plan'>): Promise<number> {
    const [ai, web] = await Promise.all([this.usage.counter(p.ownerId, 'aiCredits'), this.usage.counter(p.ownerId, 'webQueries')]);
    return PLANS[p.plan].aiCreditsPerMonth - ai - web;
  }

  /** 402 InsufficientBalance with `buy` unless at least one query is left; returns how many are. */
  async assertBalance(p: Principal): Promise<number> {
    const left = await this.remaining(p);
    if (left <= 0) {
      const plan = PLANS[p.plan];
      throw errors.paymentRequired(
        `the query balance of your ${plan.title} plan (${plan.aiCreditsPerMonth} AI credits this month) is used up`,
        'InsufficientBalance',
        { buy: this.buyUrl(), limit: plan.aiCreditsPerMonth },
      );
    }
    return left;
  }

  private async charge(p: Principal, n: number, before: number): Promise<Metered> {
    if (n > 0) await this.usage.add(p.ownerId, 'webQueries', n);
    return { queriesUsed: n, queriesRemaining: Math.max(0, before - n) };
  }

  async search(p: Principal, input: { query: string; engine?: string; country?: string; signal?: AbortSignal }) {
    if (!this.search_) {
      throw new ApiError(503, 'SearchNotConfigured', 'web search needs a search provider: the operator sets NUBE_WEB_SEARCH_URL to a SearXNG instance');
    }
    const left = await this.assertBalance(p);
    const found = await this.search_.search(input);
    const results = found.map((r, i) => ({ position: i + 1, ...r }));
    return { query: input.query, engine: input.engine ?? this.search_.name, results, ...(await this.charge(p, 1, left)) };
  }

  async fetch(p: Principal, input: { url: string; asMarkdown: boolean; signal?: AbortSignal }) {
    const left = await this.assertBalance(p);
    const page = await this.fetcher.get(input.url, { signal: input.signal });
    return { ...(await this.view(page, input.asMarkdown)), ...(await this.charge(p, 1, left)) };
  }

  async view(page: FetchedPage, asMarkdown: boolean): Promise<WebPageView & { links: string[] }> {
    const base = {
      url: page.url,
      requestedUrl: page.requestedUrl,
      status: page.status,
      contentType: page.contentType,
      truncated: page.truncated,
      fetchedAt: new Date().toISOString(),
    };
    if (!isHtml(page.contentType)) {
      return { ...base, title: null, description: null, format: 'text', text: page.body, links: [] };
    }
    let parsed: ParsedPage;
    try {
      parsed = await this.parser.parsePage(page.body, page.url, asMarkdown);
    } catch {
      // A page the parser chokes on (or takes too long over) comes back as served rather than as a 500.
      return { ...base, title: null, description: null, format: 'html', html: page.body, links: [] };
    }
    const shown = { title: parsed.title, description: parsed.description, links: parsed.links };
    return asMarkdown
      ? { ...base, ...shown, format: 'markdown', markdown: parsed.markdown }
      : { ...base, ...shown, format: 'html', html: page.body };
  }

  private async robots(origin: string, signal?: AbortSignal): Promise<RobotsRules> {
    try {
      const r = await this.fetcher.get(`${origin}/robots.txt`, { signal, anyType: true });
      return r.status >= 200 && r.status < 300 ? parseRobots(r.body) : NO_RULES;
    } catch {
      // No robots.txt reachable: nothing is disallowed (RFC 9309 2.3.1.3 for 4xx; we treat errors alike).
      return NO_RULES;
    }
  }

  /** Breadth-first over same-origin links from `url`; robots.txt `*` rules respected; 1 query per page. */
  async crawl(p: Principal, input: CrawlInput) {
    const left = await this.assertBalance(p);
    const start = new URL(input.url);
    start.hash = '';
    const origin = start.origin;
    const rules = await this.robots(origin, input.signal);
    const budget = Math.min(input.maxPages, left);
    const pages: WebPageView[] = [];
    const skipped: { url: string; code: string; error: string }[] = [];
    const seen = new Set<string>([start.href]);
    const queue: string[] = [start.href];
    let attempted = 0;
    const deadline = Date.now() + CRAWL_DEADLINE_MS;
    while (queue.length && pages.length < budget && Date.now() < deadline && !input.signal?.aborted) {
      const batch: string[] = [];
      while (queue.length && batch.length < Math.min(CRAWL_CONCURRENCY, budget - pages.length)) {
        const next = queue.shift()!;
        const u = new URL(next);
        if (!robotsAllows(rules, u.pathname + u.search)) {
          skipped.push({ url: next, code: 'RobotsDisallowed', error: 'robots.txt disallows this path' });
          continue;
        }
        batch.push(next);
      }
      const fetched = await Promise.allSettled(batch.map((u) => this.fetcher.get(u, { signal: input.signal })));
      const views = await Promise.all(fetched.map((r) => (r.status === 'fulfilled' ? this.view(r.value, true) : undefined)));
      fetched.forEach((r, i) => {
        const url = batch[i]!;
        attempted++;
        if (r.status === 'rejected') {
          const e = r.reason instanceof ApiError ? r.reason : errors.internal();
          // The start page failing is the crawl failing: answer its error.
          if (attempted === 1 && url === start.href) throw e;
          skipped.push({ url, code: e.code, error: e.message });
          return;
        }
        // Pages of a crawl leave their links out: the crawl follows them instead.
        const { links, ...page } = views[i]!;
        pages.push(page);
        if (new URL(r.value.url).origin !== origin) return;
        for (const link of links) {
          if (seen.has(link) || new URL(link).origin !== origin) continue;
          seen.add(link);
          queue.push(link);
        }
      });
    }
    return {
      url: start.href,
      count: pages.length,
      pages,
      skipped,
      ...(await this.charge(p, pages.length, left)),
    };
  }

  async startExtract(p: Principal, input: ExtractInput) {
    if (input.datasetId !== undefined) throw errors.notImplemented('appending extraction results to a dataset (datasetId)');
    const source = input.source ?? 'page';
    if (!(EXTRACT_SOURCES as readonly string[]).includes(source)) {
      throw errors.badRequest(`unknown source ${source}`, [{ path: ['body', 'source'], message: `sources: ${EXTRACT_SOURCES.join(', ')}` }], 'UnknownSource');
    }
    const urls = extractUrls(input.input).slice(0, input.limit ?? MAX_EXTRACT_URLS);
    await this.assertBalance(p);
    const jobId = newId('ext');
    await this.db.transaction().execute(async (trx) => {
      await new WebRepo(trx).insert({
        id: jobId,
        owner_id: p.ownerId,
        status: 'queued',
        source,
        urls: JSON.stringify(urls),
        data: null,
        item_count: null,
        error: null,
        created_at: Date.now(),
        finished_at: null,
      });
      await this.jobs.enqueue(EXTRACT_JOB, { jobId, ownerId: p.ownerId, plan: p.plan } satisfies ExtractJob, { db: trx });
    });
    this.jobs.notify();
    return { jobId, status: 'queued' as const };
  }

  async getExtract(p: Principal, jobId: string) {
    const r = await this.repo.get(jobId);
    if (!r || r.owner_id !== p.ownerId) throw errors.notFound('extraction job');
    return extractView(r);
  }

  /** The job: each URL fetched through the guard, its structured data read; 1 query per page read. */
  runExtract = async (job: ExtractJob): Promise<void> => {
    const r = await this.repo.get(job.jobId);
    if (!r || r.status === 'completed' || r.status === 'failed') return;
    await this.repo.update(r.id, { status: 'running' });
    const items: unknown[] = [];
    let read = 0;
    try {
      for (const url of JSON.parse(r.urls) as string[]) {
        if ((await this.remaining(job)) <= 0) {
          items.push({ requestedUrl: url, error: { code: 'InsufficientBalance', message: 'query balance used up' } });
          continue;
        }
        try {
          const page = await this.fetcher.get(url);
          await this.usage.add(job.ownerId, 'webQueries', 1);
          read++;
          const base = { url: page.url, requestedUrl: url, status: page.status, contentType: page.contentType };
          items.push(isHtml(page.contentType) ? { ...base, ...(await this.parser.parseStructured(page.body, page.url)) } : { ...base, text: page.body });
        } catch (err) {
          const e = err instanceof ApiError ? err : errors.internal();
          items.push({ requestedUrl: url, error: { code: e.code, message: e.message } });
        }
      }
      await this.repo.update(r.id, { status: 'completed', data: JSON.stringify(items), item_count: read, finished_at: Date.now() });
    } catch (err) {
      await this.repo.update(r.id, { status: 'failed', error: (err as Error).message.slice(0, 500), item_count: read, finished_at: Date.now() });
    }
  };

  async close(): Promise<void> {
    await this.parser.close();
  }
}

function extractView(r: ExtractJobRow) {
  const iso = (ms: number | null) => (ms === null ? null : new Date(Number(ms)).toISOString());
  return {
    jobId: r.id,
    status: r.status,
    ...(r.status === 'completed' && r.data !== null ? { data: JSON.parse(r.data) as unknown } : {}),
    itemCount: r.item_count,
    error: r.error,
    createdAt: iso(Number(r.created_at))!,
    finishedAt: iso(r.finished_at),
  };
}
