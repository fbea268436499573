// Datasets and the extraction sources beyond `page`: a local site with a sitemap index, an RSS feed,
// an Atom feed and pages of links; SearXNG's JSON API for `search`. Extractions and crawls append to
// datasets; rows are read by cursor, exported as CSV and NDJSON, and queried read-only with SQL.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { type Running, startSearxng } from './sites.js';

let base = '';
let server: Server;
let searx: Running;

const RSS = (
  b: string,
) => `<?xml version="1.0"?><rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel><title>Nube news</title>
${[1, 2, 3]
  .map(
    (i) =>
      `<item><title>Story ${i} &amp; more</title><link>${b}/story/${i}</link><guid>s-${i}</guid><pubDate>Mon, 0${i} Jan 2024 10:00:00 GMT</pubDate><description><![CDATA[<p>Body ${i}</p>]]></description><dc:creator>ana</dc:creator></item>`,
  )
  .join('')}
<item><title>=HYPERLINK("http://evil")</title><link>${b}/story/evil</link></item></channel></rss>`;

const ATOM = (
  b: string,
) => `<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom"><title>Atom side</title>
<entry><title>Entry one</title><link rel="alternate" href="/e/1"/><id>urn:e1</id><updated>2024-02-02T00:00:00Z</updated><summary>One</summary><author><name>Luis</name></author></entry>
<entry><title>Entry two</title><link href="${b}/e/2"/><id>urn:e2</id><published>2024-02-03T00:00:00Z</published></entry></feed>`;

const INDEX = (b: string) =>
  `<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>${b}/sitemap-a.xml</loc></sitemap><sitemap><loc>${b}/sitemap-b.xml</loc></sitemap></sitemapindex>`;
const URLSET = (b: string, paths: string[]) =>
  `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">${paths.map((p, i) => `<url><loc>${b}${p}</loc><lastmod>2024-0${i + 1}-01</lastmod><priority>0.${i + 5}</priority></url>`).join('')}</urlset>`;

const page = (title: string, links: string[]) =>
  `<!doctype html><html><head><title>${title}</title></head><body><h1>${title}</h1>${links.map((l) => `<a href="${l}">${l}</a>`).join(' ')}</body></html>`;

beforeAll(async () => {
  searx = await startSearxng();
  server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const send = (type: string, body: string, status = 200) => {
      res.writeHead(status, { 'content-type': type });
      res.end(body);
    };
    if (path === '/feed.xml') return send('application/rss+xml', RSS(base));
    if (path === '/atom.xml') return send('application/atom+xml', ATOM(base));
    if (path === '/sitemap.xml') return send('application/xml', INDEX(base));
    if (path === '/sitemap-a.xml') return send('application/xml', URLSET(base, ['/', '/a', '/b']));
    if (path === '/sitemap-b.xml') return send('application/xml', URLSET(base, ['/c']));
    if (path === '/not-xml.xml') return send('application/xml', '<html><body>nope</body></html>');
    if (path === '/robots.txt') return send('text/plain', 'User-agent: *\nAllow: /\n');
    if (path === '/')
      return send('text/html; charset=utf-8', page('Home', ['/a', '/b', 'mailto:x@y', '#top']));
    if (path === '/a') return send('text/html; charset=utf-8', page('Page A', ['/', '/c']));
    if (path === '/b' || path === '/c')
      return send('text/html; charset=utf-8', page(`Page ${path.slice(1).toUpperCase()}`, ['/']));
    send('text/plain', 'not found', 404);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((r) => server?.close(r));
  await searx?.close();
});

describe.each(DIALECTS)('%s: datasets fed by web extraction and crawls', (dialect) => {
  let t: TestNube;
  let otherKey: string;
  const call = async (method: string, path: string, body?: unknown, key?: string) => {
    const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key ?? t.ownerKey}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    let b: any;
    try {
      b = JSON.parse(text);
    } catch {
      b = text;
    }
    return { status: r.status, body: b, headers: r.headers };
  };
  const finished = async (jobId: string) => {
    for (let i = 0; i < 300; i++) {
      const j = await call('GET', `/web/extract/${jobId}`);
      if (j.body.status === 'completed' || j.body.status === 'failed') return j.body;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('extraction did not finish');
  };
  const extract = async (body: Record<string, unknown>) => {
    const r = await call('POST', '/web/extract', body);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return finished(r.body.jobId);
  };

  beforeAll(async () => {
    t = await startNube({
      dialect,
      env: { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_WEB_SEARCH_URL: `${searx.url}/` },
    });
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
  });
  afterAll(() => t?.close());

  it('refuses bad datasets with 400, a second of the same name with 409; another owner sees 404', async () => {
    for (const b of [
      { name: 'has space' },
      { name: '' },
      { name: 'x'.repeat(57) },
      { name: 'ok', schema: { type: 'array' } },
      { name: 'ok', schema: { type: 'object', properties: { a: { type: 'date' } } } },
      { name: 'ok', surprise: 1 },
    ]) {
      const r = await call('POST', '/datasets', b);
      expect(r.status, JSON.stringify(b)).toBe(400);
      expect(r.body.issues.length).toBeGreaterThan(0);
    }
    const d = await call('POST', '/datasets', { name: 'dup' });
    expect(d.status, JSON.stringify(d.body)).toBe(201);
    expect((await call('POST', '/datasets', { name: 'dup' })).status).toBe(409);
    expect((await call('GET', `/datasets/${d.body.id}`, undefined, otherKey)).status).toBe(404);
    expect((await call('GET', `/datasets/${d.body.id}/rows`, undefined, otherKey)).status).toBe(404);
    expect((await call('POST', `/datasets/${d.body.id}/query`, { sql: 'SELECT 1' }, otherKey)).status).toBe(
      404,
    );
    expect((await call('DELETE', `/datasets/${d.body.id}`, undefined, otherKey)).status).toBe(404);
    // Another owner's dataset cannot be named by an extraction or a crawl either.
    expect(
      (
        await call(
          'POST',
          '/web/extract',
          { input: `${base}/feed.xml`, source: 'feed', datasetId: d.body.id },
          otherKey,
        )
      ).status,
    ).toBe(404);
    expect(
      (await call('POST', '/web/crawl', { url: `${base}/`, datasetId: d.body.id }, otherKey)).status,
    ).toBe(404);
    expect((await call('POST', '/web/extract', { input: `${base}/`, datasetId: 'dset_nope' })).status).toBe(
      404,
    );
    // Its rows live in a database of the owner's, named after it.
    const dbs = await call('GET', '/databases');
    expect(dbs.body.items.map((x: { name: string }) => x.name)).toContain('dataset-dup');
  });

  it('a feed extraction fills a dataset; rows by cursor, CSV and NDJSON exports, read-only SQL', async () => {
    const d = (await call('POST', '/datasets', { name: 'news' })).body;
    const job = await extract({ input: `${base}/feed.xml`, source: 'feed', datasetId: d.id });
    expect(job.status, JSON.stringify(job)).toBe('completed');
    expect(job.dataset).toEqual({ id: d.id, added: 4, rejected: 0, rejections: [] });
    expect(job.data[0]).toMatchObject({
      title: 'Story 1 & more',
      url: `${base}/story/1`,
      id: 's-1',
      author: 'ana',
      summary: '<p>Body 1</p>',
      feedTitle: 'Nube news',
    });

    const got = (await call('GET', `/datasets/${d.id}`)).body;
    expect(got).toMatchObject({ rowCount: 4, schemaGiven: false });
    expect(Object.keys(got.schema.properties)).toEqual(
      expect.arrayContaining(['title', 'url', 'published', 'summary']),
    );

    const p1 = await call('GET', `/datasets/${d.id}/rows?limit=3`);
    expect(p1.body.items.map((r: { data: { title: string } }) => r.data.title)).toEqual([
      'Story 1 & more',
      'Story 2 & more',
      'Story 3 & more',
    ]);
    expect(p1.body.hasMore).toBe(true);
    const p2 = await call('GET', `/datasets/${d.id}/rows?limit=3&cursor=${p1.body.nextCursor}`);
    expect(p2.body).toMatchObject({ hasMore: false, nextCursor: null });
    expect(p2.body.items).toHaveLength(1);
    expect((await call('GET', `/datasets/${d.id}/rows?cursor=%2F%2F`)).status).toBe(400);

    const nd = await fetch(`${t.baseUrl}/api/v2/datasets/${d.id}/export`, { headers: t.auth });
    expect(nd.headers.get('content-type')).toContain('application/x-ndjson');
    const lines = (await nd.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatchObject({ _row: 2, id: 's-2', url: `${base}/story/2`, title: 'Story 2 & more' });

    const csv = await fetch(`${t.baseUrl}/api/v2/datasets/${d.id}/export?format=csv`, { headers: t.auth });
    expect(csv.headers.get('content-type')).toContain('text/csv');
    expect(csv.headers.get('content-disposition')).toContain('news.csv');
    const rows = (await csv.text()).trim().split('\r\n');
    expect(rows[0]!.startsWith('_row,_addedAt,title,url,id,')).toBe(true);
    expect(rows).toHaveLength(5);
    expect(rows[1]).toContain('Story 1 & more');
    // A title a spreadsheet would run as a formula stays text.
    expect(rows[4]).toContain(`"'=HYPERLINK(""http://evil"")"`);

    const q = await call('POST', `/datasets/${d.id}/query`, {
      sql: 'SELECT title, author FROM items WHERE title LIKE ? ORDER BY _row',
      args: ['Story%'],
    });
    expect(q.status, JSON.stringify(q.body)).toBe(200);
    expect(q.body.columns).toEqual(['title', 'author']);
    expect(q.body.rows).toEqual([
      ['Story 1 & more', 'ana'],
      ['Story 2 & more', 'ana'],
      ['Story 3 & more', 'ana'],
    ]);
    for (const sql of [
      'DELETE FROM rows',
      "INSERT INTO rows(data, added_at) VALUES ('{}', 1)",
      'DROP VIEW items',
      'SELECT 1; DELETE FROM rows',
      "ATTACH 'x' AS y",
      'SELECT * FROM nope',
    ]) {
      const r = await call('POST', `/datasets/${d.id}/query`, { sql });
      expect(r.status, sql).toBe(400);
    }
    expect((await call('GET', `/datasets/${d.id}`)).body.rowCount).toBe(4);
    expect(
      (await call('POST', `/datasets/${d.id}/query`, { sql: 'SELECT count(*) FROM rows' })).body.rows,
    ).toEqual([[4]]);
  });

  it('a given schema rejects rows that do not fit, with why', async () => {
    const d = (
      await call('POST', '/datasets', {
        name: 'strict',
        schema: {
          type: 'object',
          properties: { title: { type: 'string' }, author: { type: 'string' } },
          required: ['author'],
        },
      })
    ).body;
    expect(d.schemaGiven).toBe(true);
    const job = await extract({ input: `${base}/atom.xml`, source: 'feed', datasetId: d.id });
    // Entry two has no author: `author` is null there, not a string.
    expect(job.dataset).toMatchObject({ added: 1, rejected: 1 });
    expect(job.dataset.rejections[0]).toEqual({
      index: 1,
      reason: 'property "author" is null, the schema says string',
    });
    const rows = (await call('GET', `/datasets/${d.id}/rows`)).body.items;
    expect(rows.map((r: { data: { title: string; url: string } }) => [r.data.title, r.data.url])).toEqual([
      ['Entry one', `${base}/e/1`],
    ]);
    // The view has a column per given property.
    expect(
      (await call('POST', `/datasets/${d.id}/query`, { sql: 'SELECT title, author FROM items' })).body.rows,
    ).toEqual([['Entry one', 'Luis']]);
  });

  it('sitemaps (indexes followed), links and search are sources; limit caps the items', async () => {
    const sm = await extract({ input: base, source: 'sitemap' });
    expect(sm.status).toBe('completed');
    expect(sm.data.map((x: { url: string }) => x.url)).toEqual([
      `${base}/`,
      `${base}/a`,
      `${base}/b`,
      `${base}/c`,
    ]);
    expect(sm.data[1]).toMatchObject({
      lastmod: '2024-02-01',
      priority: 0.6,
      sitemap: `${base}/sitemap-a.xml`,
    });
    // Three sitemaps read: three queries.
    expect(sm.itemCount).toBe(3);
    const bad = await extract({ input: `${base}/not-xml.xml`, source: 'sitemap' });
    expect(bad.data[0].error.code).toBe('NotASitemap');
    const notFeed = await extract({ input: `${base}/`, source: 'feed' });
    expect(notFeed.data[0].error.code).toBe('NotAFeed');

    const links = await extract({ input: [`${base}/`, `${base}/a`], source: 'links' });
    // Document order, repeats and non-http(s) links left out; `#top` is the page itself.
    expect(links.data).toEqual([
      { url: `${base}/a`, foundOn: `${base}/` },
      { url: `${base}/b`, foundOn: `${base}/` },
      { url: `${base}/`, foundOn: `${base}/` },
      { url: `${base}/`, foundOn: `${base}/a` },
      { url: `${base}/c`, foundOn: `${base}/a` },
    ]);
    const capped = await extract({ input: [`${base}/`, `${base}/a`], source: 'links', limit: 3 });
    expect(capped.data).toHaveLength(3);

    const s = await extract({ input: { queries: ['nube cloud', 'sqlite'] }, source: 'search' });
    expect(s.data).toHaveLength(6);
    expect(s.data[0]).toMatchObject({ query: 'nube cloud', position: 1, title: 'nube cloud result 1' });
    for (const body of [
      { input: '', source: 'search' },
      { input: ['ok', 3], source: 'search' },
      { input: 'plain words', source: 'links' },
      { input: `${base}/`, source: 'scraper' },
    ]) {
      expect((await call('POST', '/web/extract', body)).status, JSON.stringify(body)).toBe(400);
    }
  });

  it('a crawl appends its pages; deleting a dataset removes its database', async () => {
    const d = (await call('POST', '/datasets', { name: 'crawled' })).body;
    const c = await call('POST', '/web/crawl', { url: `${base}/`, maxPages: 3, datasetId: d.id });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.dataset).toEqual({ id: d.id, added: 3, rejected: 0, rejections: [] });
    const titles = (
      await call('POST', `/datasets/${d.id}/query`, { sql: 'SELECT title FROM items ORDER BY _row' })
    ).body.rows.flat();
    expect(titles).toEqual(['Home', 'Page A', 'Page B']);
    expect((await call('DELETE', `/datasets/${d.id}`)).status).toBe(200);
    expect((await call('GET', `/datasets/${d.id}`)).status).toBe(404);
    expect((await call('GET', '/databases')).body.items.map((x: { name: string }) => x.name)).not.toContain(
      'dataset-crawled',
    );
    expect((await call('POST', '/web/crawl', { url: `${base}/`, datasetId: d.id })).status).toBe(404);
  });
});

describe('the schema source: an LLM fills a JSON Schema from each page', () => {
  let t: TestNube;
  let stub: LlmStub;
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: { ...t.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: await json(r) };
  };
  beforeAll(async () => {
    stub = await startLlmStub();
    t = await startNube({
      env: { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_LLM_BASE_URL: stub.url, NUBE_LLM_API_KEY: 'sk-operator', NUBE_LLM_MODEL: 'op-model', NUBE_LLM_GATEWAY_PORT: '0' },
    });
  });
  afterAll(async () => {
    await t?.close();
    await stub?.close();
  });

  it('sends the page and the schema, keeps what the LLM answers, fails a unit whose answer is not JSON', async () => {
    const schema = { type: 'object', properties: { heading: { type: 'string' }, linkCount: { type: 'integer' } } };
    stub.respond = (req) => {
      const user = String(req.messages.at(-1)?.content ?? '');
      if (user.includes(`Page ${base}/b:`)) return { content: 'I could not find it, sorry' };
      const heading = user.includes(`Page ${base}/a:`) ? 'Page A' : user.includes(`Page ${base}/:`) ? 'Home' : null;
      // Fenced, as models often answer despite being told not to.
      return { content: `\`\`\`json\n${JSON.stringify({ heading, linkCount: 2 })}\n\`\`\`` };
    };
    const d = (await call('POST', '/datasets', { name: 'filled', schema })).body;
    const start = await call('POST', '/web/extract', { input: [`${base}/`, `${base}/a`, `${base}/b`], source: 'schema', schema, prompt: 'Count the links.', datasetId: d.id });
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    let job: any;
    for (let i = 0; i < 200; i++) {
      job = (await call('GET', `/web/extract/${start.body.jobId}`)).body;
      if (job.status === 'completed' || job.status === 'failed') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(job.status).toBe('completed');
    expect(job.data.slice(0, 2)).toEqual([
      { heading: 'Home', linkCount: 2, url: `${base}/` },
      { heading: 'Page A', linkCount: 2, url: `${base}/a` },
    ]);
    expect(job.data[2]).toMatchObject({ requestedUrl: `${base}/b`, error: { code: 'ExtractionFailed' } });
    expect(job.dataset).toMatchObject({ added: 2, rejected: 0 });
    const sent = stub.requests.at(-1)!.body.messages.map((m) => String(m.content)).join('\n');
    expect(sent).toContain('"linkCount"');
    expect(sent).toContain('Count the links.');
    expect((await call('POST', `/datasets/${d.id}/query`, { sql: 'SELECT heading FROM items ORDER BY _row' })).body.rows).toEqual([['Home'], ['Page A']]);
    // The LLM's tokens count as the account's AI use.
    expect((await call('GET', '/account/llm-tokens')).body.used).toBeGreaterThan(0);
  });

  it('needs a schema, and refuses schema and prompt for other sources', async () => {
    expect((await call('POST', '/web/extract', { input: `${base}/`, source: 'schema' })).status).toBe(400);
    expect((await call('POST', '/web/extract', { input: `${base}/`, schema: { type: 'object' } })).status).toBe(400);
    expect((await call('POST', '/web/extract', { input: `${base}/`, source: 'links', prompt: 'x' })).status).toBe(400);
  });
});

describe('the schema source without an LLM', () => {
  let t: TestNube;
  beforeAll(async () => {
    t = await startNube({ env: { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' } });
  });
  afterAll(() => t?.close());

  it('answers 503 LlmNotConfigured naming the setting, as the LLM gateway does', async () => {
    const r = await fetch(`${t.baseUrl}/api/v2/web/extract`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ input: `${base}/`, source: 'schema', schema: { type: 'object' } }),
    });
    const b = await json(r);
    expect(r.status, JSON.stringify(b)).toBe(503);
    expect(b.code).toBe('LlmNotConfigured');
    expect(b.error).toContain('NUBE_LLM_BASE_URL');
  });
});
