import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime } from '../../platform/schemas.js';

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
  description: 'Query balance empty; the body carries `buy`, a URL to buy more queries',
};

const ExtractStatus = z
  .enum(['queued', 'running', 'completed', 'failed'])
  .describe('queued -> running -> completed | failed');

export const SearchResult = z
  .object({
    position: z.number().int().describe('1-based rank'),
    title: z.string(),
    url: z.string(),
    snippet: z.string(),
    publishedAt: IsoTime.nullable().describe('Publication date when known'),
  })
  .meta({ id: 'SearchResult' });

export const WebPage = z
  .object({
    url: z.string().describe('Requested URL'),
    finalUrl: z.string().describe('URL after redirects'),
    status: z.number().int().describe('HTTP status of the page'),
    contentType: z.string().nullable(),
    title: z.string().nullable(),
    content: z.string().describe('Markdown when asMarkdown, else the text of the page'),
    format: z.enum(['markdown', 'text', 'html']),
    links: z.array(z.string()).optional().describe('Absolute links found on the page'),
    fetchedAt: IsoTime,
  })
  .meta({ id: 'WebPage', description: 'One fetched web page' });

export const webOperations = [
  defineOperation({
    id: 'web.search',
    method: 'POST',
    path: '/web/search',
    summary: 'Search the web and get ranked results (title, URL, snippet)',
    description: 'Costs 1 query from the balance. 402 with `buy` when the balance is empty.',
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
        engine: z.string().describe('Engine that answered'),
        results: z.array(SearchResult),
      })
      .extend(Metering.shape),
    errors: [PAYMENT],
  }),
  defineOperation({
    id: 'web.fetch',
    method: 'POST',
    path: '/web/fetch',
    summary: 'Fetch one web page and return its content, optionally as Markdown',
    description: 'Metered in queries (1 per page); 402 with `buy` when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z.object({
      url: HttpUrl,
      country: Country.optional(),
      asMarkdown: z.boolean().default(true).describe('Convert the page to Markdown (default true)'),
    }),
    response: WebPage.extend(Metering.shape),
    errors: [PAYMENT],
  }),
  defineOperation({
    id: 'web.extract',
    method: 'POST',
    path: '/web/extract',
    summary: 'Start an asynchronous structured-data extraction job; poll it with web.extract.get',
    description:
      'Returns `{ jobId, status }` at once; GET /web/extract/{jobId} reports the status and, when ' +
      'completed, the data. Metered in queries; 402 when the balance is empty.',
    tags,
    auth: ['owner'],
    body: z
      .object({
        input: z
          .unknown()
          .describe('What to extract from: URL(s), search terms or an object the source understands'),
        source: z
          .string()
          .max(128)
          .optional()
          .describe('Extractor to use (for example a site-specific scraper)'),
        datasetId: z.string().max(200).optional().describe('Dataset to append the results to'),
        limit: z.number().int().min(1).max(10_000).optional().describe('Maximum items to extract'),
      })
      .refine((b) => b.input !== undefined, { message: 'input is required', path: ['input'] }),
    response: z.object({ jobId: z.string(), status: ExtractStatus }),
    errors: [PAYMENT],
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
      data: z.unknown().optional().describe('Extracted data; present when completed'),
      itemCount: z.number().int().nullable().describe('Items extracted so far, when known'),
      error: z.string().nullable().describe('Why the job failed, or null'),
      createdAt: IsoTime,
      finishedAt: IsoTime.nullable(),
    }),
  }),
  defineOperation({
    id: 'web.crawl',
    method: 'POST',
    path: '/web/crawl',
    summary: 'Crawl a site from a start URL and return the pages found, as Markdown',
    description:
      "Follows links within the start URL's site up to maxPages. Metered in queries (1 per page); 402 when the balance is empty.",
    tags,
    auth: ['owner'],
    body: z.object({
      url: HttpUrl.describe('Start URL'),
      maxPages: z.number().int().min(1).max(100).default(10).describe('Pages to crawl, 1-100 (default 10)'),
      country: Country.optional(),
    }),
    response: z
      .object({
        url: z.string().describe('Start URL'),
        count: z.number().int().describe('Pages returned'),
        pages: z.array(WebPage),
      })
      .extend(Metering.shape),
    errors: [PAYMENT],
  }),
];
