// The console's Domains page in headless Chromium against a real nube and a DNS server of the test's
// own: add a domain (its records shown), verify it before and after its TXT record exists (the reason
// in words, then verified), point it at a site and read the site through it, detach and remove it.
import { request } from 'node:http';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDns, type TestDns } from '../domains/dns.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';
import { launchChromium, openPage, SHOTS, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

const DOMAIN = 'www.tienda-console.test';

/** GET / on nube's HTTP port with the domain as Host. */
function viaDomain(baseUrl: string): Promise<{ status: number; body: string }> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: '/', headers: { host: DOMAIN } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('console: the Domains page in Chromium', () => {
  let t: TestNube;
  let dns: TestDns;
  let browser: Browser;
  let page: Page;
  const row = () => page.getByRole('table', { name: 'Domains' }).getByRole('row').filter({ hasText: DOMAIN });

  beforeAll(async () => {
    await ensureConsoleBuilt();
    dns = await startDns();
    t = await startNube({ env: { NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}` } });
    // A site to point the domain at: a document deployed.
    const auth = { authorization: `Bearer ${t.ownerKey}` };
    const doc = await callJson(t.baseUrl, 'POST', '/documents', { name: 'Tienda', sections: [{ heading: 'Bienvenidos', body: 'Pan **dulce**' }] }, auth);
    expect((await callJson(t.baseUrl, 'POST', `/documents/${doc.body.document.id}/deploy`, {}, auth)).status).toBe(200);
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
    await signIn(page, t.baseUrl, t.ownerKey);
    await page.getByRole('link', { name: 'Domains', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Domains' }).waitFor();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    dns?.close();
  });

  it('adds a domain with its records, and verifies it once its TXT record is there', async () => {
    await page.getByText('No domains yet.').waitFor();
    await page.getByLabel('Domain', { exact: true }).fill(DOMAIN);
    await page.getByRole('button', { name: 'Add domain' }).click();
    await page.getByText(`${DOMAIN} added. Create its DNS records (listed below), then verify it.`).waitFor();
    const txt = (await callJson(t.baseUrl, 'GET', `/domains/${DOMAIN}`, undefined, { authorization: `Bearer ${t.ownerKey}` })).body.records.find(
      (r: { type: string }) => r.type === 'TXT',
    );
    const record = page.getByRole('table', { name: 'DNS records' }).getByRole('row').filter({ hasText: 'TXT' });
    expect(await record.getByRole('cell').allTextContents()).toEqual([DOMAIN, 'TXT', txt.name, txt.value]);
    expect(await row().getByRole('cell').nth(1).textContent()).toBe('not yet');
    // Before the record exists: not verified, and why.
    await page.getByRole('button', { name: `Verify ${DOMAIN}` }).click();
    await page.getByText(`${DOMAIN} is not verified yet: no TXT record found at ${txt.name}`).waitFor();
    // A record with something else in it: that is said too.
    dns.txt.set(txt.name, ['nube-verify=not-the-token']);
    await page.getByRole('button', { name: `Verify ${DOMAIN}` }).click();
    await page.getByText(`${DOMAIN} is not verified yet: the TXT record at ${txt.name} does not hold the token ${txt.value}`).waitFor();
    dns.txt.set(txt.name, [txt.value]);
    await page.getByRole('button', { name: `Verify ${DOMAIN}` }).click();
    await page.getByText(`${DOMAIN} is verified.`).waitFor();
    expect(await row().getByRole('cell').nth(1).textContent()).toMatch(/^yes, /);
  });

  it('points it at a site (served through the domain), detaches it, removes it', async () => {
    expect((await viaDomain(t.baseUrl)).body).not.toContain('Bienvenidos');
    const site = (await callJson(t.baseUrl, 'GET', '/websites', undefined, { authorization: `Bearer ${t.ownerKey}` })).body.items[0];
    await page.getByLabel(`Point ${DOMAIN} at`).selectOption({ label: `site Tienda (${site.slug})` });
    await page.getByRole('button', { name: `Point ${DOMAIN} here` }).click();
    await page.getByText(new RegExp(`^${DOMAIN.replace(/\./g, '\\.')} now serves site Tienda`)).waitFor();
    expect(await row().getByRole('cell').nth(2).textContent()).toMatch(/^site Tienda \(/);
    const served = await viaDomain(t.baseUrl);
    expect(served.status).toBe(200);
    expect(served.body).toContain('<strong>dulce</strong>');
    await page.screenshot({ path: join(SHOTS, 'domains.png'), fullPage: true });
    await page.getByRole('button', { name: `Detach ${DOMAIN}` }).click();
    await page.getByText(`${DOMAIN} serves nothing now.`).waitFor();
    expect((await viaDomain(t.baseUrl)).body).not.toContain('dulce');
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: `Remove ${DOMAIN}` }).click();
    await page.getByText(`${DOMAIN} removed.`).waitFor();
    await page.getByText('No domains yet.').waitFor();
  });
});
