// Tenants' content that nube serves at the console's own host and port (shared documents' images,
// shared files, presigned and public file URLs) runs no script there: a page that did would hold the
// signed-in owner's cookie and read the console's CSRF token, and mint keys in that owner's name.
// Another account uploads HTML and SVG that try exactly that, puts them behind every such URL, and a
// signed-in owner opens each in Chromium: nothing runs (issue 27 item 3, the class beyond raw ports).
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNube, type TestNube } from '../helpers/server.js';
import { launchChromium, openPage, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

// Leaves a mark in the console origin's storage and tries to mint a key with the page's cookie and token.
const ATTACK = `fetch('/api/v2/account/keys',{method:'POST',headers:{'content-type':'application/json','x-nube-csrf':localStorage.getItem('nube.console.csrf')||''},body:'{"name":"pwned"}'}).catch(()=>{});localStorage.setItem('pwned','1')`;
const HTML = `<!doctype html><p>hello</p><script>${ATTACK}</script>`;
const SVG = `<svg xmlns="http://www.w3.org/2000/svg"><script>${ATTACK}</script><rect width="10" height="10"/></svg>`;

describe('tenant content on the console host runs no script', () => {
  let t: TestNube;
  let browser: Browser;
  let page: Page;
  const urls: string[] = [];

  beforeAll(async () => {
    await ensureConsoleBuilt();
    t = await startNube({ env: { NUBE_OWNER_PLAN: 'mega' } });
    const tenant = await t.nube.services.account.createAccount({ name: 'tenant', plan: 'mega' });
    const api = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
        method,
        headers: { authorization: `Bearer ${tenant.secret}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      // biome-ignore lint/suspicious/noExplicitAny: test reads arbitrary JSON
      const j = (await r.json()) as any;
      if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
      return j;
    };
    const upload = async (name: string, contentType: string, text: string) => {
      const f = await api('POST', '/files', { fileName: name, contentType, size: Buffer.byteLength(text) });
      expect((await fetch(f.putUrl, { method: 'PUT', body: text })).status).toBe(200);
      return f.file.id as string;
    };
    const html = await upload('page.html', 'text/html', HTML);
    const svg = await upload('logo.svg', 'image/svg+xml', SVG);
    const doc = await api('POST', '/documents', { name: 'innocent', sections: [{ heading: 'x', images: [{ fileId: html }, { fileId: svg }] }] });
    const share = await api('POST', '/share-tokens', { documentId: doc.document.id });
    urls.push(`/share/${share.token}/assets/${html}`, `/share/${share.token}/assets/${svg}`);
    for (const id of [html, svg]) {
      urls.push(new URL((await api('POST', '/share-tokens', { fileId: id })).url).pathname);
      const file = await api('GET', `/files/${id}`);
      if (file.readUrl) urls.push(new URL(file.readUrl).pathname + new URL(file.readUrl).search);
    }
    browser = await launchChromium();
    page = await openPage(browser, { width: 1000, height: 700 }, 30_000);
    await signIn(page, t.baseUrl, t.ownerKey);
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it("opened by a signed-in owner, none of them runs script on the console's origin", async () => {
    expect(urls.length).toBeGreaterThanOrEqual(4);
    const keysBefore = await t.nube.deps.store.db.selectFrom('api_keys').select('id').execute();
    for (const u of urls) {
      const res = await page.goto(`${t.baseUrl}${u}`);
      expect(res?.status(), u).toBe(200);
      await page.waitForTimeout(300);
    }
    await page.goto(`${t.baseUrl}/console`);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(await page.evaluate(() => (globalThis as unknown as { localStorage: { getItem(k: string): string | null } }).localStorage.getItem('pwned'))).toBeNull();
    expect((await t.nube.deps.store.db.selectFrom('api_keys').select('id').execute()).length).toBe(keysBefore.length);
  }, 120_000);
});
