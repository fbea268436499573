import type { PlanName } from '../../platform/plans.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, type ErrorIssue, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cutShort, type JobContext, type JobQueue } from '../../platform/jobs.js';
import { PLANS } from '../../platform/plans.js';
import { capKeyId, type Usage } from '../../platform/usage.js';
import type { Kysely } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { EXTRACT_SOURCES, type ExtractSource, RENDERED_SOURCES, readUnit, searchMissing, sourceInputs } from './extract-sources.js';
import type { PageRenderer } from './renderer.js';
import { type FetchedPage, isHtml, type PageFetcher } from './fetcher.js';
import type { ParsedPage } from './html.js';
import type { ParserPool } from './parser-pool.js';
import { schemaFiller } from './schema-fill.js';
import type { LlmService } from '../llm/service.js';
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
export interface ExtractJob {
  jobId: string;
  ownerId: string;
  plan: PlanName;
  /** The scoped key (with caps) that asked: the schema source's LLM tokens count toward its llmTokens cap. */
  keyId?: string;
}

export interface ExtractInput {
  input?: unknown;
  source?: string;
  datasetId?: string;
  limit?: number;
  /** For source `schema`: the JSON Schema the LLM fills from each page, and what to tell it. */
  schema?: Record<string, unknown>;
  prompt?: string;
  /** Read pages in Chromium with their scripts run (sources page, links, schema). */
  render?: boolean;
}

/** What the `schema` source needs of the LLM area. */
export type SchemaLlm = Pick<LlmService, 'complete' | 'assertReady'>;

export interface CrawlInput {
  url: string;
  maxPages: number;
  datasetId?: string;
  signal?: AbortSignal;
}

/** Where extractions and crawls append their rows (the datasets area). */
export interface DatasetSink {
  assertAppendable(p: Principal, datasetId: string): Promise<void>;
  append(ownerId: string, datasetId: string, rows: { data: Record<string, unknown>; url?: string | null }[], jobId: string | null): Promise<{ added: number; rejected: { index: number; reason: string }[] }>;
}

/** What a job or crawl reports of its append: rows added, rows rejected (the first reasons). */
function datasetReport(datasetId: string, r: { added: number; rejected: { index: number; reason: string }[] }) {
  return { id: datasetId, added: r.added, rejected: r.rejected.length, rejections: r.rejected.slice(0, 20) };
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
    private readonly datasets: () => DatasetSink | undefined = () => undefined,
    private readonly llm: () => SchemaLlm | undefined = () => undefined,
    private readonly renderer?: PageRenderer,
  ) {
    this.repo = new WebRepo(db);
  }

  private sink(): DatasetSink {
    const d = this.datasets();
    if (!d) throw new Error('the datasets area is not built');
    return d;
  }

  /** Queries left this month: web queries share the plan's AI credits with AI use (as account usage shows). */
  async remaining(p: Pick<Principal, 'ownerId' | 'plan'>): Promise<number> {
    const [ai, web] = await Promise.all([this.usage.counter(p.ownerId, 'aiCredits'), this.usage.counter(p.ownerId, 'webQueries')]);
    return PLANS[p.plan].aiCreditsPerMonth - ai - web;
  }

  /** 402 InsufficientBalance with `buy` unless at least one query is left; returns how many are. */
  async assertBalance(p: Principal): Promise<number> {
    await this.usage.assertKeyCaps(p);
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
    await this.usage.addForKey(p, 'webQueries', n);
    return { queriesUsed: n, queriesRemaining: Math.max(0, before - n) };
  }

  async search(p: Principal, input: { query: string; engine?: string; country?: string; signal?: AbortSignal }) {
    if (!this.search_) throw searchMissing();
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
    if (input.datasetId !== undefined) await this.sink().assertAppendable(p, input.datasetId);
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
    const metered = await this.charge(p, pages.length, left);
    const dataset =
      input.datasetId === undefined
        ? undefined
        : datasetReport(input.datasetId, await this.sink().append(p.ownerId, input.datasetId, pages.map((pg) => ({ data: { ...pg }, url: pg.url })), null));
    return { url: start.href, count: pages.length, pages, skipped, ...(dataset ? { dataset } : {}), ...metered };
  }

  async startExtract(p: Principal, input: ExtractInput) {
    const source = (input.source ?? 'page') as ExtractSource;
    if (!(EXTRACT_SOURCES as readonly string[]).includes(source)) {
      throw errors.badRequest(`unknown source ${source}`, [{ path: ['body', 'source'], message: `sources: ${EXTRACT_SOURCES.join(', ')}` }], 'UnknownSource');
    }
    const units = sourceInputs(source, input.input);
    if (source === 'search' && !this.search_) throw searchMissing();
    if (source === 'schema') {
      if (input.schema === undefined) throw errors.validation([{ path: ['body', 'schema'], message: 'source schema needs the JSON Schema to fill' }]);
      const llm = this.llm();
      if (!llm) throw new ApiError(503, 'LlmNotConfigured', 'the schema source needs an LLM: the operator sets NUBE_LLM_BASE_URL, or the account adds its AI key');
      await llm.assertReady(p.ownerId, p.plan);
      await this.usage.assertKeyCaps(p, ['llmTokens']);
    } else if (input.schema !== undefined || input.prompt !== undefined) {
      throw errors.validation([{ path: ['body', input.schema !== undefined ? 'schema' : 'prompt'], message: 'only source schema takes a schema and a prompt' }]);
    }
    if (input.render && !RENDERED_SOURCES.includes(source)) {
      throw errors.validation([{ path: ['body', 'render'], message: `render reads pages of sources ${RENDERED_SOURCES.join(', ')}; ${source} reads data` }]);
    }
    if (input.datasetId !== undefined) await this.sink().assertAppendable(p, input.datasetId);
    await this.assertBalance(p);
    const jobId = newId('ext');
    await this.db.transaction().execute(async (trx) => {
      await new WebRepo(trx).insert({
        id: jobId,
        owner_id: p.ownerId,
        status: 'queued',
        source,
        urls: JSON.stringify(units),
        data: null,
        item_count: null,
        error: null,
        created_at: Date.now(),
        finished_at: null,
        dataset_id: input.datasetId ?? null,
        item_limit: input.limit ?? null,
        dataset_result: null,
        options:
          source === 'schema' || input.render
            ? JSON.stringify({ schema: input.schema ?? null, prompt: input.prompt ?? null, render: input.render === true })
            : null,
      });
      const keyId = capKeyId(p);
      await this.jobs.enqueue(EXTRACT_JOB, { jobId, ownerId: p.ownerId, plan: p.plan, ...(keyId ? { keyId } : {}) } satisfies ExtractJob, { db: trx });
    });
    this.jobs.notify();
    return { jobId, status: 'queued' as const };
  }

  async getExtract(p: Principal, jobId: string) {
    const r = await this.repo.get(jobId);
    if (!r || r.owner_id !== p.ownerId) throw errors.notFound('extraction job');
    return extractView(r);
  }

  /**
   * The job: each unit (URL or query) read through the guard by its source, 1 query per page, sitemap,
   * feed or search read; entries past `limit` (items and units that failed) dropped; rows appended to the dataset when one was named.
   * A run cut by nube's own stop (`ctx`) records nothing: the job runs again when nube is back.
   */
  runExtract = async (job: ExtractJob, ctx?: Pick<JobContext, 'signal' | 'stopping'>): Promise<void> => {
    const r = await this.repo.get(job.jobId);
    if (!r || r.status === 'completed' || r.status === 'failed') return;
    await this.repo.update(r.id, { status: 'running' });
    const source = r.source as ExtractSource;
    const limit = r.item_limit === null ? Number.POSITIVE_INFINITY : Number(r.item_limit);
    const items: unknown[] = [];
    const rows: { data: Record<string, unknown>; url: string | null }[] = [];
    let read = 0;
    const opts = r.options === null ? null : (JSON.parse(r.options) as { schema: unknown; prompt: string | null; render?: boolean });
    const llm = this.llm();
    const fill = source === 'schema' && opts && llm ? schemaFiller(llm, job.ownerId, opts.schema, opts.prompt, job.keyId) : undefined;
    const renderer = opts?.render ? this.renderer : undefined;
    const render = renderer ? (url: string) => renderer.get(url) : undefined;
    try {
      for (const unit of JSON.parse(r.urls) as string[]) {
        if (items.length >= limit) break;
        if ((await this.remaining(job)) <= 0) {
          items.push({ requested: unit, error: { code: 'InsufficientBalance', message: 'query balance used up' } });
          continue;
        }
        try {
          const got = await readUnit(source, unit, { fetcher: this.fetcher, parser: this.parser, search: this.search_, fill, render }, ctx?.signal);
          await this.usage.add(job.ownerId, 'webQueries', got.queries);
          read += got.queries;
          for (const item of got.items.slice(0, limit - items.length)) {
            items.push(item);
            rows.push({ data: item, url: typeof item.url === 'string' ? item.url : null });
          }
        } catch (err) {
          if (ctx && cutShort(ctx)) throw err;
          const e = err instanceof ApiError ? err : errors.internal();
          items.push({ [source === 'search' ? 'query' : 'requestedUrl']: unit, error: { code: e.code, message: e.message } });
        }
      }
      const dataset = r.dataset_id === null ? null : datasetReport(r.dataset_id, await this.sink().append(job.ownerId, r.dataset_id, rows, r.id));
      await this.repo.update(r.id, {
        status: 'completed',
        data: JSON.stringify(items),
        item_count: read,
        finished_at: Date.now(),
        dataset_result: dataset ? JSON.stringify(dataset) : null,
      });
    } catch (err) {
      if (ctx && cutShort(ctx)) throw err;
      await this.repo.update(r.id, { status: 'failed', error: (err as Error).message.slice(0, 500), item_count: read, finished_at: Date.now() });
    }
  };

  async close(): Promise<void> {
    await this.parser.close();
    await this.renderer?.close();
  }
}

function extractView(r: ExtractJobRow) {
  const iso = (ms: number | null) => (ms === null ? null : new Date(Number(ms)).toISOString());
  return {
    jobId: r.id,
    status: r.status,
    ...(r.status === 'completed' && r.data !== null ? { data: JSON.parse(r.data) as unknown } : {}),
    itemCount: r.item_count,
    ...(r.dataset_result !== null ? { dataset: JSON.parse(r.dataset_result) as ReturnType<typeof datasetReport> } : r.dataset_id !== null ? { dataset: { id: r.dataset_id } } : {}),
    error: r.error,
    createdAt: iso(Number(r.created_at))!,
    finishedAt: iso(r.finished_at),
  };
}
