import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { limited } from '../../platform/json-limits.js';
import { IsoTime } from '../../platform/schemas.js';
import type { WebService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    web: WebService;
  }
}

const tags = ['Web'];

const Country = z
  .string()
  .regex(/^[A-Za-z]{2}$/)
  .describe('ISO 3166-1 alpha-2 country to search or fetch from (`mx`, `us`, ...)');
const HttpUrl = z.url({ protocol: /^https?$/ }).describe('http(s) URL');

const Metering = z
  .object({
    queriesUsed: z.number().int().describe('Queries charged for this call'),
    queriesRemaining: z.number().int().nullable().describe('Balance left after the call; null if unmetered'),
  })
  .describe('Query metering of this call');

const PAYMENT = {
  status: 402,
  code: 'InsufficientBalance',
  description: 'Query balance empty (code InsufficientBalance); the body carries `buy`, a URL to buy more queries',
};
const REFUSED = { status: 400, code: 'UrlRefused', description: 'The URL (or a redirect) points to a private, loopback or link-local address' };
const UNREACHABLE = {
  status: 502,
  code: 'FetchFailed',
  description: 'The page could not be fetched: HostNotFound, ConnectionRefused, FetchTimeout, TooManyRedirects or FetchFailed',
};
const BINARY = { status: 415, code: 'UnsupportedContentType', description: 'The page is binary (image, PDF, archive...), not text or HTML' };

const ExtractStatus = z
  .enum(['queued', 'running', 'completed', 'failed'])
  .describe('queued -> running -> completed | failed');

export const SearchResult = z
  .object({
    position: z.number().int().describe('1-based rank'),
    title: z.string(),
    url: z.string(),
    content: z.string().describe('Snippet of the page, as the engine gave it'),
    engine: z.string().nullable().describe('Engine that found this result, when known'),
    publishedAt: IsoTime.nullable().describe('Publication date when known'),
  })
  .meta({ id: 'SearchResult' });

const pageFields = {
  url: z.string().describe('URL of the page after redirects'),
  requestedUrl: z.string().describe('URL asked for'),
  status: z.number().int().describe('HTTP status the page answered with (a 404 page is still returned)'),
  contentType: z.string().nullable(),
  title: z.string().nullable(),
  description: z.string().nullable().describe('meta description, when the page has one'),
  format: z.enum(['markdown', 'html', 'text']).describe('Which of markdown, html or text is present'),
  markdown: z.string().optional().describe('Main content (Readability) as Markdown: HTML pages with asMarkdown'),
  html: z.string().optional().describe('The HTML as served: HTML pages without asMarkdown'),
  text: z.string().optional().describe('The body as served: non-HTML text (plain text, JSON, XML...)'),
  truncated: z.boolean().describe('The body passed the size cap and was cut there'),
  fetchedAt: IsoTime,
};

export const WebPage = z
  .object({
    ...pageFields,
    links: z.array(z.string()).describe('Absolute http(s) links found on the page, without fragments'),
  })
  .meta({ id: 'WebPage', description: 'One fetched web page' });

export const CrawledPage = z.object(pageFields).meta({ id: 'CrawledPage', description: 'One page of a crawl (always Markdown for HTML)' });

export const webOperations = [
  defineOperation({
    id: 'web.search',
    method: 'POST',
    path: '/web/search',
    summary: 'Search the web and get ranked results (title, URL, snippet)',
    description:
      'Asks the operator\'s SearXNG instance (NUBE_WEB_SEARCH_URL; without one: 503 SearchNotConfigured). ' +
      'Costs 1 query from the balance (web queries share the plan\'s monthly AI credits). 402 with `buy` when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z.object({
      query: z.string().min(1).max(2000).describe('Search terms'),
      engine: z.string().max(64).optional().describe('Search engine to use (provider default when absent)'),
      country: Country.optional(),
    }),
    response: z
      .object({
        query: z.string(),
        engine: z.string().describe('Engine asked for, or the provider (`searxng`) when none was'),
        results: z.array(SearchResult),
      })
      .extend(Metering.shape),
    errors: [
      PAYMENT,
      { status: 502, code: 'SearchProviderFailed', description: 'The search provider failed or answered something else than its JSON API' },
      { status: 503, code: 'SearchNotConfigured', description: 'No search provider configured (NUBE_WEB_SEARCH_URL)' },
    ],
    handler: ({ services, principal, body, signal }) => services.web.search(principal, { ...body, signal }),
  }),
  defineOperation({
    id: 'web.fetch',
    method: 'POST',
    path: '/web/fetch',
    summary: 'Fetch one web page and return its content, optionally as Markdown',
    description:
      'Follows up to 5 redirects; private, loopback and link-local addresses are refused (400 UrlRefused). ' +
      'HTML becomes its main content as Markdown (asMarkdown, default) or is returned as served; other text ' +
      'passes through; binary answers 415. Metered in queries (1 per page); 402 with `buy` when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z.object({
      url: HttpUrl,
      country: Country.optional(),
      asMarkdown: z.boolean().default(true).describe('Convert the page to Markdown (default true)'),
    }),
    response: WebPage.extend(Metering.shape),
    errors: [PAYMENT, REFUSED, BINARY, UNREACHABLE],
    handler: ({ services, principal, body, signal }) => services.web.fetch(principal, { ...body, signal }),
  }),
  defineOperation({
    id: 'web.extract',
    method: 'POST',
    path: '/web/extract',
    summary: 'Start an asynchronous structured-data extraction job; poll it with web.extract.get',
    description:
      'Returns `{ jobId, status }` at once; GET /web/extract/{jobId} reports the status and, when ' +
      'completed, the data. `input` is a URL, an array of up to 50 URLs, or `{ url }` / `{ urls }` (for ' +
      '`search`: a query, an array of queries, or `{ query }` / `{ queries }`). Sources: `page` (default; ' +
      "each page's structured data: title, description, language, canonical, Open Graph, meta tags, JSON-LD, " +
      "headings), `links` (the links each page holds), `sitemap` (the pages a site's sitemap lists: a " +
      "sitemap's URL, or a site whose /sitemap.xml is read; indexes followed, 10 sitemaps per URL), `feed` " +
      '(the items of an RSS or Atom feed), `search` (the configured engine\'s results), `schema` (an LLM fills ' +
      '`schema`, a JSON Schema, from each page\'s main content, as Firecrawl\'s extract does; an array answer is ' +
      'one item per element; LLM tokens metered as AI use). `render: true` reads the pages of page, links and ' +
      'schema in Chromium with their scripts run, every request the page makes fetched by nube through the ' +
      'same address checks (a page cannot reach a private address through the browser), within the fetch ' +
      'time limit and four times its byte cap, nothing kept between pages. A unit that fails ' +
      'yields `{ requestedUrl | query, error }`. `limit` caps the entries of `data` (items, and units that failed). With `datasetId` the items are ' +
      'appended to that dataset as rows (the job reports `dataset: { added, rejected }`). Metered in queries ' +
      '(1 per page, sitemap or feed read, or search made); 402 when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z
      .object({
        input: limited(z.unknown(), { maxDepth: 8, maxBytes: 256 * 1024 }).describe(
          'What to extract from: URL(s), search terms or an object the source understands (at most 8 levels, 256 KiB)',
        ),
        source: z
          .string()
          .max(128)
          .optional()
          .describe('page (default), links, sitemap, feed, search or schema'),
        datasetId: z.string().max(200).optional().describe('Dataset to append the results to'),
        schema: limited(z.record(z.string(), z.unknown()), { maxDepth: 16, maxKeys: 500, maxBytes: 64 * 1024 })
          .optional()
          .describe('Source schema: the JSON Schema an LLM fills from each page (required there, refused elsewhere)'),
        prompt: z.string().max(2000).optional().describe('Source schema: what to tell the LLM besides the schema'),
        render: z
          .boolean()
          .optional()
          .describe('Read pages in Chromium with their scripts run (sources page, links, schema); every request the page makes goes through the same address checks'),
        limit: z.number().int().min(1).max(10_000).optional().describe('Maximum items to extract'),
      })
      .refine((b) => b.input !== undefined, { message: 'input is required', path: ['input'] }),
    response: z.object({ jobId: z.string(), status: ExtractStatus }),
    errors: [
      PAYMENT,
      { status: 400, code: 'UnknownSource', description: 'source is not one nube has (page, links, sitemap, feed, search)' },
      { status: 404, code: 'NotFound', description: 'datasetId names no dataset of yours' },
      { status: 503, code: 'SearchNotConfigured', description: 'source search without a search engine configured' },
      { status: 503, code: 'LlmNotConfigured', description: 'source schema without an LLM (NUBE_LLM_BASE_URL or the account\'s AI key)' },
    ],
    handler: ({ services, principal, body }) => services.web.startExtract(principal, body),
  }),
  defineOperation({
    id: 'web.extract.get',
    method: 'GET',
    path: '/web/extract/{jobId}',
    summary: 'Get the status of an extraction job, and its data when finished',
    tags,
    auth: ['owner'],
    params: z.object({ jobId: z.string().min(1).max(200).describe('Extraction job id') }),
    response: z.object({
      jobId: z.string(),
      status: ExtractStatus,
      data: z.unknown().optional().describe('Extracted items, one per URL in order; present when completed'),
      itemCount: z.number().int().nullable().describe('Queries used (pages, sitemaps or feeds read; searches made), when finished'),
      dataset: z
        .object({
          id: z.string(),
          added: z.number().int().optional().describe('Rows appended'),
          rejected: z.number().int().optional().describe("Rows that did not fit the dataset's schema"),
          rejections: z.array(z.object({ index: z.number().int(), reason: z.string() })).optional(),
        })
        .optional()
        .describe('The dataset the rows went to, when the job named one (counts once completed)'),
      error: z.string().nullable().describe('Why the job failed, or null'),
      createdAt: IsoTime,
      finishedAt: IsoTime.nullable(),
    }),
    handler: ({ services, principal, params }) => services.web.getExtract(principal, params.jobId),
  }),
  defineOperation({
    id: 'web.crawl',
    method: 'POST',
    path: '/web/crawl',
    summary: 'Crawl a site from a start URL and return the pages found, as Markdown',
    description:
            "Breadth-first over the start URL's origin (same scheme, host and port) up to maxPages, honouring " +
      "robots.txt rules for `*`. Pages that fail are listed in `skipped`; the start page failing fails the crawl. " +
      'Metered in queries (1 per page returned); 402 when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z.object({
      url: HttpUrl.describe('Start URL'),
      maxPages: z.number().int().min(1).max(50).default(10).describe('Pages to crawl, 1-50 (default 10)'),
      country: Country.optional(),
      datasetId: z.string().max(200).optional().describe('Dataset to append the pages to, one row each'),
    }),
    response: z
      .object({
        url: z.string().describe('Start URL'),
        count: z.number().int().describe('Pages returned'),
        pages: z.array(CrawledPage),
        skipped: z
          .array(z.object({ url: z.string(), code: z.string(), error: z.string() }))
          .describe('Pages not returned: robots.txt (RobotsDisallowed), refused, unreachable or binary'),
        dataset: z
          .object({ id: z.string(), added: z.number().int(), rejected: z.number().int(), rejections: z.array(z.object({ index: z.number().int(), reason: z.string() })) })
          .optional()
          .describe('When datasetId was given: rows appended and rejected'),
      })
      .extend(Metering.shape),
    errors: [PAYMENT, REFUSED, BINARY, UNREACHABLE],
    handler: ({ services, principal, body, signal }) => services.web.crawl(principal, { ...body, signal }),
  }),
];
