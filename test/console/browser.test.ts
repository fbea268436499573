// The console driven in headless Chromium (Debian's, through playwright-core) against a real nube with
// sandboxes: sign in, create a webhook, upload a file (and see its webhook delivered), run SQL, create
// a sandbox and type `echo hola` in its terminal, fetch a page, create an API key; the first load's
// size and time are measured; each page is saved as a screenshot under docs/console/.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS } from '../sandboxes/helpers.js';
import { launchChromium, openPage, SHOTS } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';


describe('web console in Chromium', () => {
  let t: SandboxNube;
  let browser: Browser;
  let page: Page;
  let site: Server;
  let siteUrl: string;
  const hooks: string[] = [];
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const go = async (label: string) => {
    await page.getByRole('link', { name: label, exact: true }).click();
    await page.getByRole('heading', { level: 1 }).first().waitFor();
  };

  beforeAll(async () => {
    await ensureConsoleBuilt();
    // One loopback server: a page for the fetch playground, and the webhook endpoint.
    site = createServer((req, res) => {
      if (req.method === 'POST') {
        let body = '';
        req.on('data', (c: Buffer) => {
          body += c;
        });
        req.on('end', () => {
          hooks.push(body);
          res.end('thanks');
        });
        return;
      }
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end('<!doctype html><html><head><title>Hola page</title></head><body><h1>Hola from loopback</h1><p>A paragraph with <a href="/x">a link</a>.</p></body></html>');
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    t = await startSandboxNube('console-browser', { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' });
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
    page.on('console', (m) => m.type() === 'error' && console.log(`page console: ${m.text()}`));
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await browser?.close();
    await new Promise((r) => site?.close(r));
    if (t) await stopSandboxNube(t);
  });

  it('loads small and fast, and signs in with an API key kept out of the browser', async () => {
    // Three cold loads, each in a fresh context (empty cache): the median is the figure, so one load
    // slowed by the machine's other work does not decide it, and a retry still loads cold.
    const loads: { interactiveMs: number; jsCssBytes: number }[] = [];
    for (let i = 0; i < 3; i++) {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
      const cold = await ctx.newPage();
      await cold.goto(`${t.baseUrl}/console`);
      await cold.getByLabel('API key').waitFor();
      loads.push(await measureLoad(cold));
      await ctx.close();
    }
    loads.sort((a, b) => a.interactiveMs - b.interactiveMs);
    const load = loads[1]!;
    await page.goto(`${t.baseUrl}/console`);
    await page.getByLabel('API key').waitFor();
    console.log(`console first load: ${(load.jsCssBytes / 1024).toFixed(1)} KB of compressed JS+CSS, sign-in form interactive after ${load.interactiveMs.toFixed(0)} ms`);
    for (const l of loads) {
      expect(l.jsCssBytes).toBeGreaterThan(0);
      expect(l.jsCssBytes).toBeLessThan(250 * 1024);
    }
    await shot('sign-in');
    await page.getByLabel('API key').fill('nube_sk_live_wrongwrongwrongwrongwrongwrong');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('not valid');
    await page.getByLabel('API key').fill(t.ownerKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.getByRole('meter', { name: 'Storage' }).waitFor();
    const stored = await page.evaluate(() => {
      const g = globalThis as unknown as { localStorage: object; sessionStorage: object; document: { cookie: string } };
      return JSON.stringify({ ...g.localStorage }) + JSON.stringify({ ...g.sessionStorage }) + g.document.cookie;
    });
    expect(stored).not.toContain(t.ownerKey);
    expect(stored).not.toContain('ncs_'); // the session cookie is HttpOnly
    await shot('overview');
    // Last: a load slowed past the budget fails this test only, the later ones still find the session.
    expect(load.interactiveMs).toBeLessThan(1000);
  });

  it('creates a webhook and shows its secret once', async () => {
    await go('Webhooks');
    await page.getByLabel('Endpoint URL').fill(`${siteUrl}/hook`);
    await page.getByRole('button', { name: 'Create webhook' }).click();
    await page.getByText('Signing secret, shown once').waitFor();
    expect(await page.locator('.secret').textContent()).toMatch(/^whsec_|.{16,}/);
    await page.getByRole('cell', { name: `${siteUrl}/hook` }).waitFor();
    await shot('webhooks');
  });

  it('uploads a file with progress, lists it, and its webhook is delivered', async () => {
    await go('Files');
    await page.getByLabel('Upload a file').setInputFiles({ name: 'hola.txt', mimeType: 'text/plain', buffer: Buffer.from('hola mundo\n'.repeat(1000)) });
    await page.getByRole('cell', { name: 'hola.txt' }).waitFor();
    await page.getByRole('button', { name: 'Open' }).first().click();
    await page.getByRole('button', { name: 'Make a share link (24 h)' }).click();
    await page.getByText('Share link:').waitFor();
    await shot('files');
    await expect.poll(() => hooks.some((h) => h.includes('file.created')), { timeout: 20_000 }).toBe(true);
    await go('Webhooks');
    await page.getByRole('button', { name: 'Deliveries' }).first().click();
    await page.getByText('file.created').first().waitFor();
    await expect.poll(() => page.locator('.deliveries .status').first().textContent(), { timeout: 20_000 }).toBe('succeeded');
    await shot('webhook-deliveries');
  });

  it('runs SQL in the editor and shows the rows, and an SQL error in words', async () => {
    await go('Databases');
    await page.getByLabel('Name').fill('shop');
    await page.getByRole('button', { name: 'Create database' }).click();
    await page.getByRole('link', { name: 'shop' }).click();
    await page.getByLabel('SQL').fill('SELEC 1');
    await page.getByRole('button', { name: 'Run' }).click();
    await expect.poll(() => page.locator('#sql-error').textContent()).toContain('syntax error');
    await page.getByLabel('SQL').fill("CREATE TABLE fruit(name TEXT, qty INTEGER); INSERT INTO fruit VALUES ('mango', 21), ('lima', 4); SELECT name, qty * 2 AS doubled FROM fruit ORDER BY name;");
    await page.getByLabel('SQL').press('Control+Enter');
    await page.getByRole('cell', { name: '42' }).waitFor();
    expect(await page.locator('table.grid tbody tr').count()).toBe(2);
    await page.getByRole('button', { name: 'fruit' }).waitFor();
    // CSV import (quotes and a doubled quote), then the export downloads the database file.
    await page.getByLabel('Into table').fill('people');
    const csv = 'name,city\r\nAna,"Mérida, Yuc."\r\n"Luis ""el grande""",CDMX\r\n';
    await page.getByLabel('CSV file (first line: column names)').setInputFiles({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
    await page.getByText('Imported 2 row(s) into people.').waitFor();
    await page.getByLabel('SQL').fill('SELECT name, city FROM people ORDER BY name');
    await page.getByRole('button', { name: 'Run' }).click();
    await page.getByRole('cell', { name: 'Mérida, Yuc.' }).waitFor();
    await page.getByRole('cell', { name: 'Luis "el grande"' }).waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export' }).click()]);
    const file = await download.path();
    expect(readFileSync(file).subarray(0, 15).toString()).toBe('SQLite format 3');
    // The page's export sends the session's CSRF token; the cookie alone (a plain link) opens nothing.
    const bare = await page.evaluate(async (u) => (await fetch(u)).status, `/api/v2/databases/${page.url().split('/').pop()}/export`);
    expect(bare).toBe(401);
    await shot('databases');
  });

  it('creates a sandbox and runs echo hola in its terminal', async () => {
    await go('Sandboxes');
    await page.getByLabel('Template').fill('base');
    await page.getByRole('button', { name: 'Create sandbox' }).click();
    await page.getByText('Terminal: connected').waitFor({ timeout: 120_000 });
    await page.locator('.xterm-helper-textarea').focus();
    await page.keyboard.type('echo hola');
    await page.keyboard.press('Enter');
    await expect
      .poll(async () => (await page.locator('.xterm-rows > div').allTextContents()).map((l) => l.trim()), { timeout: 15_000 })
      .toContain('hola');
    await shot('sandbox');
    await go('Sandboxes');
    await page.locator('.status.running').first().waitFor();
    await shot('sandboxes');
  });

  it('fetches a page in the web playground: Markdown next to the page', async () => {
    await go('Web');
    await page.getByLabel('URL').fill(`${siteUrl}/`);
    await page.getByRole('button', { name: 'Fetch' }).click();
    await expect.poll(() => page.locator('pre.markdown').textContent()).toContain('Hola from loopback');
    await shot('web');
  });

  it('creates an API key shown once', async () => {
    await go('API keys');
    await page.getByLabel('Name').fill('ci');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('it is shown once').waitFor();
    expect(await page.locator('.secret').textContent()).toMatch(/^nube_sk_live_/);
    await shot('api-keys');
  });

  it('works on a phone-sized screen, and signs out', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('button', { name: 'Menu' }).click();
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('meter', { name: 'Storage' }).waitFor();
    await shot('overview-phone');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API key').waitFor();
    const after = await page.evaluate(() => fetch('/api/v2/account').then((r) => r.status));
    expect(after).toBe(401);
  });
});

/** Chromium's timings of a console load: when the sign-in form was interactive, and the compressed JS+CSS it fetched. */
async function measureLoad(page: Page): Promise<{ interactiveMs: number; jsCssBytes: number }> {
  return page.evaluate(() => {
    // Browser globals, typed loosely: this file compiles against Node's lib.
    const res = performance.getEntriesByType('resource') as unknown as { name: string; transferSize: number }[];
    return {
      interactiveMs: performance.getEntriesByName('console-interactive')[0]!.startTime,
      jsCssBytes: res.filter((r) => /\.(js|css)$/.test(r.name)).reduce((n, r) => n + r.transferSize, 0),
    };
  });
}
