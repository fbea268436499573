import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { ARTICLE, type Running, startSearxng, startSite } from './sites.js';

let site: Running;
let searx: Running;
beforeAll(async () => {
  site = await startSite();
  searx = await startSearxng();
});
afterAll(async () => {
  await site?.close();
  await searx?.close();
});

/** A port nothing listens on (just released). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

const ALLOW = { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' };

/** A nube for the enclosing describe, started in its beforeAll (options read then) and closed after. */
function useNube(opts: () => Parameters<typeof startNube>[0]) {
  const n = {} as { t: TestNube; call: ReturnType<typeof caller> };
  beforeAll(async () => {
    n.t = await startNube(opts());
    n.call = caller(n.t);
  });
  afterAll(() => n.t?.close());
  return n;
}

describe('web with the allow-list admitting 127.0.0.1', () => {
  const n = useNube(() => ({
    // The fetch time limit is generous for a busy machine; the test's slow page answers only after 30 s.
    env: { ...ALLOW, NUBE_WEB_SEARCH_URL: `${searx.url}/`, NUBE_WEB_TIMEOUT_MS: '5000', NUBE_WEB_MAX_BYTES: '100000' },
  }));
  const call = (...a: Parameters<ReturnType<typeof caller>>) => n.call(...a);

  const fetchPage = (body: Record<string, unknown>) => call('POST', '/web/fetch', body);

  it('fetches an HTML page as Markdown of its main content, with title and absolute links', async () => {
    const r = await fetchPage({ url: `${site.url}/` });
    expect(r.status).toBe(200);
    const b = await json(r);
    expect(b).toMatchObject({
      url: `${site.url}/`,
      requestedUrl: `${site.url}/`,
      status: 200,
      contentType: 'text/html; charset=utf-8',
      title: 'Home page',
      description: 'About Home page',
      format: 'markdown',
      truncated: false,
      queriesUsed: 1,
    });
    expect(b.markdown).toContain('Welcome home');
    expect(b.markdown).toContain(ARTICLE);
    expect(b.markdown).toContain('**bold**');
    expect(b.markdown).toContain(`[the next page](${site.url}/a)`);
    expect(b.markdown).toMatch(/^-\s+first item$/m);
    expect(b.markdown).not.toContain('Footer text');
    expect(b.html).toBeUndefined();
    expect(b.links).toEqual([
      `${site.url}/`,
      `${site.url}/a`,
      `${site.url}/private/x`,
      `${site.url}/binary.png`,
      'http://example.invalid/elsewhere',
    ]);
    expect(Date.parse(b.fetchedAt)).toBeGreaterThan(0);
  });

  it('returns the HTML as served with asMarkdown false, and non-HTML text as is', async () => {
    const h = await json(await fetchPage({ url: `${site.url}/a`, asMarkdown: false }));
    expect(h.format).toBe('html');
    expect(h.html).toContain('<title>Page A</title>');
    expect(h.markdown).toBeUndefined();
    const txt = await json(await fetchPage({ url: `${site.url}/text.txt` }));
    expect(txt).toMatchObject({ format: 'text', text: 'plain text, passed through as is\n', title: null, links: [] });
    const js = await json(await fetchPage({ url: `${site.url}/data.json` }));
    expect(js).toMatchObject({ format: 'text', text: '{"ok":true}', contentType: 'application/json' });
  });

  it('follows redirects and reports the final URL; a 404 page is returned with its status', async () => {
    const b = await json(await fetchPage({ url: `${site.url}/redirect` }));
    expect(b).toMatchObject({ url: `${site.url}/a`, requestedUrl: `${site.url}/redirect`, title: 'Page A' });
    const nf = await fetchPage({ url: `${site.url}/missing` });
    expect(nf.status).toBe(200);
    expect(await json(nf)).toMatchObject({ status: 404, title: 'Not found' });
  });

  it('answers clear errors: binary 415, redirect loop, timeout, refused connection, unknown host', async () => {
    const bin = await fetchPage({ url: `${site.url}/binary.png` });
    expect(bin.status).toBe(415);
    expect(await json(bin)).toMatchObject({ code: 'UnsupportedContentType', contentType: 'image/png' });
    const untyped = await fetchPage({ url: `${site.url}/untyped-binary` });
    expect(untyped.status).toBe(415);
    expect(await json(await fetchPage({ url: `${site.url}/untyped-html` }))).toMatchObject({ contentType: null, title: 'Untyped', format: 'markdown' });
    const loop = await fetchPage({ url: `${site.url}/loop` });
    expect(loop.status).toBe(502);
    expect((await json(loop)).code).toBe('TooManyRedirects');
    const slow = await fetchPage({ url: `${site.url}/slow` });
    expect(slow.status).toBe(502);
    expect((await json(slow)).code).toBe('FetchTimeout');
    const closed = await fetchPage({ url: `http://127.0.0.1:${await closedPort()}/` });
    expect(closed.status).toBe(502);
    expect((await json(closed)).code).toBe('ConnectionRefused');
    const nohost = await fetchPage({ url: 'http://no-such-host.invalid/' });
    expect(nohost.status).toBe(502);
    expect(['HostNotFound', 'FetchFailed']).toContain((await json(nohost)).code);
  });

  it('cuts a huge body at NUBE_WEB_MAX_BYTES and says so', async () => {
    const b = await json(await fetchPage({ url: `${site.url}/huge` }));
    expect(b.truncated).toBe(true);
    expect(b.text).toHaveLength(100_000);
  });

  it('refuses a redirect to the metadata service or to a loopback address outside the allow-list', async () => {
    for (const path of ['/to-metadata', '/to-loopback']) {
      const r = await fetchPage({ url: `${site.url}${path}` });
      expect(r.status, path).toBe(400);
      expect((await json(r)).code).toBe('UrlRefused');
    }
  });

  it('rejects bad input with 400 and issues', async () => {
    for (const body of [{}, { url: 'ftp://127.0.0.1/x' }, { url: 'not a url' }, { url: `${site.url}/`, country: 'mex' }, { url: `${site.url}/`, asMarkdown: 'yes' }]) {
      const r = await fetchPage(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect((await json(r)).issues.length).toBeGreaterThan(0);
    }
    const c = await call('POST', '/web/crawl', { url: `${site.url}/`, maxPages: 51 });
    expect(c.status).toBe(400);
    const s = await call('POST', '/web/search', { query: '' });
    expect(s.status).toBe(400);
  });

  it('crawls breadth-first within the origin, honours robots.txt and skips binary pages', async () => {
    const r = await call('POST', '/web/crawl', { url: `${site.url}/`, maxPages: 10 });
    expect(r.status).toBe(200);
    const b = await json(r);
    expect(b.url).toBe(`${site.url}/`);
    expect(b.pages.map((p: { url: string }) => p.url)).toEqual([`${site.url}/`, `${site.url}/a`, `${site.url}/b`, `${site.url}/c`]);
    expect(b.count).toBe(4);
    expect(b.queriesUsed).toBe(4);
    expect(b.pages[1]).toMatchObject({ status: 200, title: 'Page A', format: 'markdown' });
    expect(b.pages[1].markdown).toContain('Page A heading');
    expect(b.pages[1].links).toBeUndefined();
    expect(b.skipped).toEqual(
      expect.arrayContaining([
        { url: `${site.url}/private/x`, code: 'RobotsDisallowed', error: expect.any(String) },
        { url: `${site.url}/binary.png`, code: 'UnsupportedContentType', error: expect.any(String) },
      ]),
    );
    expect(site.hits).not.toContain('/private/x');
    expect(site.hits).toContain('/robots.txt');
  });

  it('stops a crawl at maxPages; a start page that fails fails the crawl', async () => {
    const b = await json(await call('POST', '/web/crawl', { url: `${site.url}/a`, maxPages: 2 }));
    expect(b.pages.map((p: { title: string }) => p.title)).toEqual(['Page A', 'Home page']);
    const bad = await call('POST', '/web/crawl', { url: `${site.url}/binary.png` });
    expect(bad.status).toBe(415);
  });

  it('searches through the SearXNG JSON API', async () => {
    const r = await call('POST', '/web/search', { query: 'nube cloud', engine: 'brave', country: 'mx' });
    expect(r.status).toBe(200);
    const b = await json(r);
    expect(b).toMatchObject({ query: 'nube cloud', engine: 'brave', queriesUsed: 1 });
    expect(b.results).toHaveLength(3);
    expect(b.results[0]).toEqual({
      position: 1,
      title: 'nube cloud result 1',
      url: 'https://example.org/nube%20cloud/1',
      content: 'Snippet 1 about nube cloud',
      engine: 'brave',
      publishedAt: '2025-03-04T05:06:07.000Z',
    });
    const asked = new URL(searx.hits.at(-1)!, 'http://x').searchParams;
    expect(Object.fromEntries(asked)).toEqual({ q: 'nube cloud', format: 'json', engines: 'brave', language: 'es-MX' });
    const plain = await json(await call('POST', '/web/search', { query: 'x' }));
    expect(plain.engine).toBe('searxng');
  });

  it('runs web_fetch through MCP tools/call', async () => {
    const client = new Client({ name: 'nube-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${n.t.baseUrl}/api/mcp`), { requestInit: { headers: n.t.auth } }),
    );
    const r = await client.callTool({ name: 'web_fetch', arguments: { url: `${site.url}/b` } });
    expect(r.isError).toBe(false);
    const sc = r.structuredContent as { title: string; markdown: string };
    expect(sc.title).toBe('Page B');
    expect(sc.markdown).toContain('Page B heading');
    const refused = await client.callTool({ name: 'web_fetch', arguments: { url: `${site.url}/to-metadata` } });
    expect(refused.isError).toBe(true);
    expect(JSON.stringify(refused.content)).toContain('UrlRefused');
    await client.close();
  });
});

describe('web without an allow-list or a search provider', () => {
  const n = useNube(() => ({}));
  const call = (...a: Parameters<ReturnType<typeof caller>>) => n.call(...a);

  it('refuses loopback, link-local (metadata) and private targets with 400 UrlRefused', async () => {
    const robotsBefore = site.hits.filter((h) => h === '/robots.txt').length;
    for (const url of [`${site.url}/`, 'http://169.254.169.254/latest/meta-data/', 'http://[::ffff:127.0.0.1]/', 'http://0/', 'http://u:p@8.8.8.8/', 'http://[::1]/', 'http://10.0.0.1/', 'http://2130706433/', 'http://localhost/']) {
      const r = await call('POST', '/web/fetch', { url });
      expect(r.status, url).toBe(400);
      expect((await json(r)).code, url).toBe('UrlRefused');
    }
    const c = await call('POST', '/web/crawl', { url: `${site.url}/` });
    expect(c.status).toBe(400);
    expect((await json(c)).code).toBe('UrlRefused');
    expect(site.hits.filter((h) => h === '/robots.txt').length).toBe(robotsBefore);
  });

  it('answers 503 SearchNotConfigured without NUBE_WEB_SEARCH_URL', async () => {
    const r = await call('POST', '/web/search', { query: 'anything' });
    expect(r.status).toBe(503);
    expect((await json(r)).code).toBe('SearchNotConfigured');
  });
});

describe.each(DIALECTS)('web metering (%s)', (dialect) => {
  const n = useNube(() => ({ dialect, env: { ...ALLOW, NUBE_OWNER_PLAN: 'byte', NUBE_WEB_SEARCH_URL: searx.url } }));
  const call = (...a: Parameters<ReturnType<typeof caller>>) => n.call(...a);
  let ownerId: string;
  beforeAll(async () => {
    ownerId = (await json(await call('GET', '/account'))).id;
  });

  it('counts fetch, crawl pages and searches as web queries, shown in account usage', async () => {
    const f = await json(await call('POST', '/web/fetch', { url: `${site.url}/a` }));
    expect(f).toMatchObject({ queriesUsed: 1, queriesRemaining: 998 });
    const c = await json(await call('POST', '/web/crawl', { url: `${site.url}/a`, maxPages: 3 }));
    expect(c).toMatchObject({ count: 3, queriesUsed: 3, queriesRemaining: 995 });
    const s = await json(await call('POST', '/web/search', { query: 'q' }));
    expect(s).toMatchObject({ queriesUsed: 1, queriesRemaining: 994 });
    // A refused URL costs nothing.
    expect((await call('POST', '/web/fetch', { url: 'http://169.254.169.254/' })).status).toBe(400);
    expect(await n.t.nube.deps.usage.counter(ownerId, 'webQueries')).toBe(5);
    const usage = await json(await call('GET', '/account/usage'));
    expect(usage.aiCredits).toMatchObject({ used: 5, limit: 999, remaining: 994 });
  });

  it('answers 402 InsufficientBalance with buy once the allowance is used up; a crawl stops at the balance', async () => {
    await n.t.nube.deps.usage.add(ownerId, 'webQueries', 992);
    const c = await json(await call('POST', '/web/crawl', { url: `${site.url}/a`, maxPages: 5 }));
    expect(c).toMatchObject({ count: 2, queriesUsed: 2, queriesRemaining: 0 });
    for (const [path, body] of [
      ['/web/fetch', { url: `${site.url}/a` }],
      ['/web/crawl', { url: `${site.url}/a` }],
      ['/web/search', { query: 'q' }],
      ['/web/extract', { input: `${site.url}/a` }],
    ] as const) {
      const r = await call('POST', path, body);
      expect(r.status, path).toBe(402);
      const b = await json(r);
      expect(b.code).toBe('InsufficientBalance');
      expect(b.buy).toBe(`${n.t.baseUrl}/api/v2/account/usage`);
    }
    expect(await n.t.nube.deps.usage.counter(ownerId, 'webQueries')).toBe(999);
  });
});

describe.each(DIALECTS)('web extract (%s)', (dialect) => {
  const n = useNube(() => ({ dialect, env: ALLOW }));
  const call = (...a: Parameters<ReturnType<typeof caller>>) => n.call(...a);

  async function finished(jobId: string) {
    for (let i = 0; i < 400; i++) {
      const b = await json(await call('GET', `/web/extract/${jobId}`));
      if (b.status === 'completed' || b.status === 'failed') return b;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('extraction did not finish');
  }

  it('reads structured data of each URL in a job and reports it when completed', async () => {
    const r = await call('POST', '/web/extract', { input: { urls: [`${site.url}/product`, `${site.url}/binary.png`, `${site.url}/text.txt`] } });
    expect(r.status).toBe(200);
    const started = await json(r);
    expect(started).toEqual({ jobId: expect.stringMatching(/^ext_/), status: 'queued' });
    const done = await finished(started.jobId);
    expect(done).toMatchObject({ jobId: started.jobId, status: 'completed', itemCount: 2, error: null });
    expect(Date.parse(done.finishedAt)).toBeGreaterThanOrEqual(Date.parse(done.createdAt));
    const [product, binary, text] = done.data;
    expect(product).toMatchObject({
      url: `${site.url}/product`,
      status: 200,
      title: 'Taza nube',
      description: 'Una taza',
      language: 'es-MX',
      canonical: `${site.url}/product?id=1`,
      openGraph: { title: 'Taza', image: 'https://img.example/t.png' },
      meta: { 'twitter:card': 'summary', description: 'Una taza' },
      jsonLd: [{ '@type': 'Product', name: 'Taza', offers: { price: '99.00', priceCurrency: 'MXN' } }],
      headings: [
        { level: 1, text: 'Taza' },
        { level: 2, text: 'Detalles' },
      ],
    });
    expect(binary).toEqual({ requestedUrl: `${site.url}/binary.png`, error: { code: 'UnsupportedContentType', message: expect.any(String) } });
    expect(text).toMatchObject({ status: 200, text: 'plain text, passed through as is\n' });
  });

  it('takes a single URL, honours limit, refuses guarded URLs per item', async () => {
    const one = await finished((await json(await call('POST', '/web/extract', { input: `${site.url}/product`, limit: 1 }))).jobId);
    expect(one.data).toHaveLength(1);
    const two = await finished((await json(await call('POST', '/web/extract', { input: [`${site.url}/a`, 'http://169.254.169.254/', `${site.url}/b`], limit: 2 }))).jobId);
    expect(two.data).toHaveLength(2);
    expect(two.data[1].error.code).toBe('UrlRefused');
  });

  it('an extraction cut by nube stopping keeps nothing of the cut run, and completes when it runs again', async () => {
    const jobs = n.t.nube.deps.jobs;
    await jobs.stop();
    let jobId = '';
    try {
      // A URL whose fetch fails while nube stops (nothing listens on port 9): the failure is nube's stop.
      jobId = (await json(await call('POST', '/web/extract', { input: [`${site.url}/product`, 'http://127.0.0.1:9/'] }))).jobId;
      const me = await json(await call('GET', '/account'));
      const cut = { signal: new AbortController().signal, stopping: AbortSignal.abort(new Error('job queue stopping')) };
      await expect(n.t.nube.services.web.runExtract({ jobId, ownerId: me.id, plan: me.plan }, cut)).rejects.toThrow();
      const after = await json(await call('GET', `/web/extract/${jobId}`));
      expect(after.status).toBe('running');
      expect(after.data).toBeUndefined();
    } finally {
      jobs.start();
    }
    const done = await finished(jobId);
    expect(done).toMatchObject({ status: 'completed', itemCount: 1 });
    expect(done.data[0]).toMatchObject({ title: 'Taza nube' });
  });

  it('answers 400 for input it cannot read, unknown sources, 404 for an unknown dataset or job', async () => {
    for (const body of [{}, { input: 'not a url' }, { input: [] }, { input: { q: 'x' } }, { input: ['ftp://x/'] }, { input: Array(51).fill(`${site.url}/`) }]) {
      const r = await call('POST', '/web/extract', body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect((await json(r)).issues.length).toBeGreaterThan(0);
    }
    const src = await call('POST', '/web/extract', { input: `${site.url}/`, source: 'amazon' });
    expect(src.status).toBe(400);
    expect((await json(src)).code).toBe('UnknownSource');
    expect((await call('POST', '/web/extract', { input: `${site.url}/`, datasetId: 'ds_1' })).status).toBe(404);
    expect((await call('GET', '/web/extract/ext_nope')).status).toBe(404);
  });
});
