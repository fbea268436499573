import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { PLANS } from '../../platform/plans.js';
import type { Usage } from '../../platform/usage.js';
import { type FetchedPage, isHtml, type PageFetcher } from './fetcher.js';
import { parsePage } from './html.js';
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

export interface CrawlInput {
  url: string;
  maxPages: number;
  signal?: AbortSignal;
}

export class WebService {
  constructor(
    private readonly fetcher: PageFetcher,
    private readonly search_: SearchProvider | undefined,
    private readonly usage: Usage,
    private readonly buyUrl: () => string,
  ) {}

  /** Queries left this month: web queries share the plan's AI credits with AI use (as account usage shows). */
  async remaining(p: Principal): Promise<number> {
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
    return { ...this.view(page, input.asMarkdown), ...(await this.charge(p, 1, left)) };
  }

  view(page: FetchedPage, asMarkdown: boolean): WebPageView & { links: string[] } {
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
    let parsed: ReturnType<typeof parsePage>;
    try {
      parsed = parsePage(page.body, page.url, asMarkdown);
    } catch {
      // A page the parser chokes on comes back as served rather than as a 500.
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
        const { links, ...page } = this.view(r.value, true);
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

  async close(): Promise<void> {
    await this.fetcher.close();
  }
}
