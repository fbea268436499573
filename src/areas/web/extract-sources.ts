// What each extraction source takes and makes. `page`: a page's structured data. `links`: the links a
// page holds. `sitemap`: the pages a site's sitemap lists (sitemap indexes followed). `feed`: the items
// of an RSS or Atom feed. `search`: the results of the configured search engine. Each unit of input
// (a URL, a query) costs one query; `limit` caps the items.
import { ApiError, type ErrorIssue, errors } from '../../platform/errors.js';
import { type FetchedPage, isHtml, type PageFetcher } from './fetcher.js';
import type { ParserPool } from './parser-pool.js';
import type { SearchProvider } from './search-provider.js';

/** Sources whose pages `render: true` reads in Chromium. */
export const RENDERED_SOURCES: readonly string[] = ['page', 'links', 'schema'];

export const EXTRACT_SOURCES = ['page', 'links', 'sitemap', 'feed', 'search', 'schema'] as const;
export type ExtractSource = (typeof EXTRACT_SOURCES)[number];

/** Units (URLs or queries) one extraction job takes. */
export const MAX_EXTRACT_INPUTS = 50;
/** Sitemaps read for one URL (an index and the sitemaps it lists). */
const MAX_SITEMAPS = 10;

export type Item = Record<string, unknown>;

function isHttpUrl(u: unknown): boolean {
  try {
    return typeof u === 'string' && /^https?:$/.test(new URL(u).protocol);
  } catch {
    return false;
  }
}

/**
 * The units an input names for a source: URLs (a URL, an array, `{ url }` / `{ urls }`) or, for
 * `search`, queries (a string, an array, `{ query }` / `{ queries }`); else 400 naming what is wrong.
 */
export function sourceInputs(source: ExtractSource, input: unknown): string[] {
  const search = source === 'search';
  const [one, many] = search ? ['query', 'queries'] : ['url', 'urls'];
  const o = input as Record<string, unknown> | null;
  const list =
    typeof input === 'string'
      ? [input]
      : Array.isArray(input)
        ? input
        : o && typeof o === 'object'
          ? (o[many] ?? (o[one] === undefined ? undefined : [o[one]]))
          : undefined;
  const shape = `source ${source} takes ${search ? 'a query, an array of queries, or { query } / { queries }' : 'a URL, an array of URLs, or { url } / { urls }'}`;
  if (!Array.isArray(list) || list.length === 0)
    throw errors.validation([{ path: ['body', 'input'], message: shape }]);
  if (list.length > MAX_EXTRACT_INPUTS)
    throw errors.validation([
      { path: ['body', 'input'], message: `at most ${MAX_EXTRACT_INPUTS} ${many} per job` },
    ]);
  const issues: ErrorIssue[] = [];
  list.forEach((u, i) => {
    const ok = search ? typeof u === 'string' && u.trim().length > 0 && u.length <= 500 : isHttpUrl(u);
    if (!ok)
      issues.push({
        path: ['body', 'input', i],
        message: search ? 'not a query (text of 1 to 500 characters)' : 'not an http(s) URL',
      });
  });
  if (issues.length) throw errors.validation(issues);
  return list.map(String);
}

export interface SourceDeps {
  fetcher: PageFetcher;
  parser: ParserPool;
  search?: SearchProvider;
  /** `render: true`: pages read in Chromium with their scripts run (page, links, schema). */
  render?: (url: string) => Promise<FetchedPage>;
  /** For `schema`: the LLM that fills the schema from a page's Markdown, for the job's owner. */
  fill?: (markdown: string, url: string, signal?: AbortSignal) => Promise<unknown>;
}

/** One unit read: its items, and the queries it cost (pages, sitemaps or feeds fetched; searches made). */
export async function readUnit(
  source: ExtractSource,
  unit: string,
  d: SourceDeps,
  signal?: AbortSignal,
): Promise<{ items: Item[]; queries: number }> {
  // A page as a browser would see it, when asked; sitemaps, feeds and searches are data, never rendered.
  const htmlPage = (url: string) => (d.render ? d.render(url) : d.fetcher.get(url, { signal }));
  switch (source) {
    case 'page': {
      const page = await htmlPage(unit);
      const base = { url: page.url, requestedUrl: unit, status: page.status, contentType: page.contentType };
      return {
        items: [
          isHtml(page.contentType)
            ? { ...base, ...(await d.parser.parseStructured(page.body, page.url)) }
            : { ...base, text: page.body },
        ],
        queries: 1,
      };
    }
    case 'links': {
      const page = await htmlPage(unit);
      if (!isHtml(page.contentType)) throw notA(page, 'an HTML page');
      const parsed = await d.parser.parsePage(page.body, page.url, false);
      return { items: parsed.links.map((url) => ({ url, foundOn: page.url })), queries: 1 };
    }
    case 'sitemap': {
      const u = new URL(unit);
      const first = /\.xml(\.gz)?$/i.test(u.pathname) ? u.href : `${u.origin}/sitemap.xml`;
      const queue = [first];
      const seen = new Set(queue);
      const items: Item[] = [];
      let read = 0;
      while (queue.length && read < MAX_SITEMAPS) {
        const url = queue.shift()!;
        const page = await d.fetcher.get(url, { signal });
        read++;
        const map = await d.parser.parseSitemap(page.body, page.url).catch((e: Error) => {
          throw new ApiError(422, 'NotASitemap', `${url}: ${e.message}`);
        });
        for (const x of map.urls) items.push({ ...x, sitemap: page.url });
        for (const s of map.sitemaps) {
          if (seen.has(s)) continue;
          seen.add(s);
          queue.push(s);
        }
      }
      return { items, queries: read };
    }
    case 'feed': {
      const page = await d.fetcher.get(unit, { signal });
      const feed = await d.parser.parseFeed(page.body, page.url).catch((e: Error) => {
        throw new ApiError(422, 'NotAFeed', `${unit}: ${e.message}`);
      });
      return { items: feed.items.map((x) => ({ ...x, feed: page.url, feedTitle: feed.title })), queries: 1 };
    }
    case 'schema': {
      if (!d.fill) throw new Error('the schema source has no LLM');
      const page = await htmlPage(unit);
      if (!isHtml(page.contentType) && !/^text\//.test(page.contentType ?? '')) throw notA(page, 'a page');
      const markdown = isHtml(page.contentType)
        ? (await d.parser.parsePage(page.body, page.url, true)).markdown
        : page.body;
      const got = await d.fill(markdown, page.url, signal);
      // An array answer is one item per element; an object is one item.
      const list = Array.isArray(got) ? got : [got];
      return {
        items: list.map((x) => ({
          ...(x && typeof x === 'object' && !Array.isArray(x) ? (x as Item) : { value: x }),
          url: page.url,
        })),
        queries: 1,
      };
    }
    case 'search': {
      if (!d.search) throw searchMissing();
      const found = await d.search.search({ query: unit });
      return { items: found.map((r, i) => ({ query: unit, position: i + 1, ...r })), queries: 1 };
    }
  }
}

function notA(page: FetchedPage, what: string): ApiError {
  return new ApiError(
    422,
    'UnsupportedContent',
    `${page.url} is ${page.contentType ?? 'of no stated type'}, not ${what}`,
  );
}

export function searchMissing(): ApiError {
  return new ApiError(
    503,
    'SearchNotConfigured',
    'web search needs a search provider: the operator sets NUBE_WEB_SEARCH_URL to a SearXNG instance',
  );
}
