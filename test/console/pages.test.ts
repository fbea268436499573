// The console's agents, machines and documents pages driven in headless Chromium against a real nube
// (no sandboxes, no LLM): create a document from Markdown sections, see it listed, deploy it as a site
// and read the site and its PDF, edit it and deploy it again; list machine tiers and try a launch (its answer in words); try to
// create an agent (an error in words where no template or LLM is provisioned). Screenshots of each page
// go to docs/console/.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNube, type TestNube } from '../helpers/server.js';
import { siteRequest } from '../helpers/site.js';
import { launchChromium, openPage, SHOTS, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

describe('console pages for agents, machines and documents in Chromium', () => {
  let t: TestNube;
  let browser: Browser;
  let page: Page;
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const go = async (label: string) => {
    await page.getByRole('link', { name: label, exact: true }).click();
    await page.getByRole('heading', { level: 1, name: label }).waitFor();
  };

  beforeAll(async () => {
    await ensureConsoleBuilt();
    t = await startNube();
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
    await signIn(page, t.baseUrl, t.ownerKey);
  }, 180_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('creates a document from Markdown sections, lists it, deploys it as a site and links its PDF', async () => {
    await go('Documents');
    await page.getByLabel('Name', { exact: true }).fill('Menú de otoño');
    await page.getByLabel('Heading of section 1').fill('Entradas');
    await page.getByLabel('Body of section 1 (Markdown)').fill('- **Sopa** de calabaza\n- Ensalada');
    await page.getByRole('button', { name: 'Add a section' }).click();
    await page.getByLabel('Heading of section 2').fill('Postres');
    await page.getByLabel('Body of section 2 (Markdown)').fill('Pan de *muerto*');
    await page.getByRole('button', { name: 'Create document' }).click();
    const row = page.getByRole('row').filter({ hasText: 'Menú de otoño' });
    await row.getByText('draft').waitFor();
    expect(await row.getByRole('cell').nth(2).textContent()).toBe('2');
    await row.getByRole('button', { name: 'Deploy as a site' }).click();
    const link = page.getByRole('link', { name: 'open the site', exact: true });
    await link.waitFor();
    const site = await link.getAttribute('href');
    const home = await siteRequest(site!, t.baseUrl, '/');
    expect(home.status).toBe(200);
    expect(home.text).toContain('<strong>Sopa</strong>');
    await row.getByText('published').waitFor();
    await row.getByRole('link', { name: 'Open the site of Menú de otoño' }).waitFor();
    // The PDF opens in a new tab: fetched by the page (with the session's CSRF token), shown from a blob.
    // The blob the tab is pointed at is kept aside to be read here.
    await page.evaluate(() => {
      const g = globalThis as unknown as { URL: { createObjectURL(b: Blob): string }; lastBlob?: Blob };
      const make = g.URL.createObjectURL.bind(g.URL);
      g.URL.createObjectURL = (b: Blob) => {
        g.lastBlob = b;
        return make(b);
      };
    });
    const [tab, req] = await Promise.all([
      page.context().waitForEvent('page'),
      page.waitForRequest((r) => r.url().includes('/pdf?inline=1')),
      row.getByRole('button', { name: 'PDF' }).click(),
    ]);
    expect(req.headers()['x-nube-csrf']).toMatch(/^[0-9a-f]{64}$/);
    await tab.waitForURL(/^blob:/);
    const pdf = await page.evaluate(async () => {
      const b = (globalThis as unknown as { lastBlob: Blob }).lastBlob;
      return { type: b.type, head: await b.slice(0, 5).text() };
    });
    console.log(`document pdf: ${JSON.stringify(pdf)}`);
    expect(pdf).toEqual({ type: 'application/pdf', head: '%PDF-' });
    await tab.close();
    await shot('documents');
    // Edited in the same form: its sections come back into it, and a change reaches the site once
    // deployed again.
    await row.getByRole('button', { name: 'Edit' }).click();
    await page.getByRole('heading', { level: 2, name: 'Edit Menú de otoño' }).waitFor();
    expect(await page.getByLabel('Heading of section 2').inputValue()).toBe('Postres');
    await page.getByLabel('Body of section 1 (Markdown)').fill('- **Sopa** de elote\n- Ensalada');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByText('Saved Menú de otoño. Its site shows the change once deployed again.').waitFor();
    await page.getByRole('heading', { level: 2, name: 'New document' }).waitFor();
    await row.getByRole('button', { name: 'Deploy again' }).click();
    for (const end = Date.now() + 20_000; Date.now() < end; await page.waitForTimeout(200)) {
      if ((await siteRequest(site!, t.baseUrl, '/')).text.includes('de elote')) break;
    }
    const edited = await siteRequest(site!, t.baseUrl, '/');
    expect(edited.text).toContain('<strong>Sopa</strong> de elote');
    expect(edited.text).not.toContain('calabaza');
    expect((await siteRequest(site!, t.baseUrl, '/')).status).toBe(200);
    page.once('dialog', (d) => d.accept());
    await row.getByRole('button', { name: 'Delete' }).click();
    await page.getByText('No documents yet.').waitFor();
  });

  it('lists machine tiers and shows a launch answer in words', async () => {
    await go('Machines');
    await page.getByText('No machines yet.').waitFor();
    await page.getByText('Tiers and monthly prices').click();
    await page.getByRole('cell', { name: 'micro', exact: true }).waitFor();
    await page.getByLabel('Archive URL', { exact: true }).fill('http://127.0.0.1:9/app.tar.gz');
    await page.getByRole('button', { name: 'Launch', exact: true }).click();
    const answer = page.locator('#launch-error, .notice, pre.logs').first();
    await answer.waitFor({ timeout: 60_000 });
    // Loopback is not a public address: the SSRF guard refuses it, and the page says so beside the form.
    expect(await answer.textContent()).toContain('archiveUrl: refused');
    await shot('machines');
  });

  it('lists agents and shows why one cannot be created here in words', async () => {
    await go('Agents');
    await page.getByText('No agents yet.').waitFor();
    await page.getByLabel('Name', { exact: true }).fill('helper');
    await page.getByRole('button', { name: 'Create agent' }).click();
    const error = page.locator('#agent-error');
    await error.waitFor();
    const words = await error.textContent();
    console.log(`agent create answer: ${words}`);
    expect(words).toMatch(/[a-z]{3,} [a-z]{3,}/i);
    await shot('agents');
  });

  it('lays the documents page out on a phone-sized screen', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('button', { name: 'Menu' }).click();
    await page.getByRole('link', { name: 'Documents', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Documents' }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('Horario');
    await page.getByLabel('Body of section 1 (Markdown)').fill('Lunes a viernes, **9 a 18 h**.');
    await page.getByRole('button', { name: 'Create document' }).click();
    await page.getByRole('cell', { name: 'Horario' }).waitFor();
    const overflow = await page.evaluate(() => {
      const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document;
      return d.documentElement.scrollWidth - d.documentElement.clientWidth;
    });
    expect(overflow).toBeLessThanOrEqual(0);
    await shot('documents-phone');
  });
});
