// `render: true`: a page whose content its scripts write is read in Chromium; every request the page
// makes goes through nube's outbound guard, so a script cannot reach an address the guard refuses
// (here 127.0.0.2, outside the test's allow-list of 127.0.0.1) through the browser.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startNube, type TestNube } from '../helpers/server.js';

let site: Server;
let secret: Server;
let base = '';
let secretUrl = '';
const secretHits: string[] = [];

const JS_PAGE = (
  secretAt: string,
) => `<!doctype html><html><head><title>Shell</title></head><body><main id="app">loading</main>
<script>
fetch('/data.json').then((r) => r.json()).then((d) => {
  document.title = d.title;
  document.getElementById('app').innerHTML = '<h1>' + d.title + '</h1><p>' + d.body + '</p><a href="/from-script">more</a>';
  return fetch('${secretAt}').then((r) => r.text()).then((t) => { document.body.dataset.leak = t; }, () => { document.body.dataset.leak = 'blocked'; });
});
</script></body></html>`;

beforeAll(async () => {
  secret = createServer((req, res) => {
    secretHits.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'text/plain', 'access-control-allow-origin': '*' });
    res.end('the metadata secret');
  });
  await new Promise<void>((r) => secret.listen(0, '127.0.0.2', r));
  secretUrl = `http://127.0.0.2:${(secret.address() as AddressInfo).port}/latest/meta-data`;
  site = createServer((req, res) => {
    if (req.url === '/app') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return res.end(JS_PAGE(secretUrl));
    }
    if (req.url === '/data.json') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ title: 'Made by script', body: 'Only a browser sees this.' }));
    }
    if (req.url === '/redirect-inside') {
      res.writeHead(302, { location: secretUrl });
      return res.end();
    }
    res.writeHead(404);
    res.end();
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((r) => site?.close(r));
  await new Promise((r) => secret?.close(r));
});

describe('web extraction with render: true', () => {
  let t: TestNube;
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: { ...t.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: await json(r) };
  };
  const run = async (body: Record<string, unknown>) => {
    const s = await call('POST', '/web/extract', body);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    for (let i = 0; i < 600; i++) {
      const j = (await call('GET', `/web/extract/${s.body.jobId}`)).body;
      if (j.status === 'completed' || j.status === 'failed') return j;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('extraction did not finish');
  };
  beforeAll(async () => {
    t = await startNube({ env: { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_WEB_TIMEOUT_MS: '15000' } });
  });
  afterAll(() => t?.close());

  it('reads what scripts write; the script cannot reach a refused address through the browser', async () => {
    const plain = await run({ input: `${base}/app` });
    expect(plain.data[0].title).toBe('Shell');
    const rendered = await run({ input: `${base}/app`, render: true });
    expect(rendered.status, JSON.stringify(rendered)).toBe('completed');
    expect(rendered.data[0]).toMatchObject({ url: `${base}/app`, status: 200, title: 'Made by script' });
    expect(JSON.stringify(rendered.data[0].headings)).toContain('Made by script');
    const links = await run({ input: `${base}/app`, source: 'links', render: true });
    expect(links.data.map((x: { url: string }) => x.url)).toContain(`${base}/from-script`);
    // The script's fetch of 127.0.0.2 never left nube.
    expect(secretHits).toEqual([]);
  }, 120_000);

  it('refuses a refused start page or a redirect into one, in words', async () => {
    const r = await run({ input: [secretUrl, `${base}/redirect-inside`], render: true });
    expect(r.data[0]).toMatchObject({ requestedUrl: secretUrl, error: { code: 'UrlRefused' } });
    expect(r.data[1].error).toBeDefined();
    expect(secretHits).toEqual([]);
    expect(
      (await call('POST', '/web/extract', { input: `${base}/feed.xml`, source: 'feed', render: true }))
        .status,
    ).toBe(400);
  }, 120_000);
});
