// The console's Forms page in headless Chromium against a real nube: a published site's form takes two
// submissions (one with a file) over HTTP; the page lists the form with its site and count, shows each
// submission's fields and files, deletes one and then the form. Screenshot: docs/console/forms.png.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { multipart, send, URLENCODED } from '../forms/helpers.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';
import { zipOf } from '../helpers/site.js';
import { launchChromium, openPage, SHOTS, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

describe('console: the Forms page in Chromium', () => {
  let t: TestNube;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    await ensureConsoleBuilt();
    t = await startNube({ env: { NUBE_OWNER_PLAN: 'mega' } });
    const auth = { authorization: `Bearer ${t.ownerKey}` };
    const archive = await zipOf({
      'index.html': '<form data-nube-form="contacto"><input name="correo"><textarea name="mensaje"></textarea></form>',
    });
    const site = await callJson(t.baseUrl, 'POST', '/websites', { slug: 'panaderia', archiveBase64: archive.toString('base64') }, auth);
    expect(site.status).toBe(201);
    const host = new URL(site.body.url).host;
    const first = await send(t.baseUrl, {
      path: '/f/contacto',
      host,
      body: 'correo=ana%40example.com&mensaje=Quiero+un+pastel',
      headers: URLENCODED,
    });
    expect(first.status).toBe(303);
    const fd = new FormData();
    fd.set('correo', 'luis@example.com');
    fd.set('mensaje', 'Mi foto');
    fd.set('foto', new Blob([Buffer.alloc(2048, 1)], { type: 'image/png' }), 'pastel.png');
    const mp = await multipart(fd);
    expect((await send(t.baseUrl, { path: '/f/contacto', host, body: mp.body, headers: { 'content-type': mp.type } })).status).toBe(303);
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
    await signIn(page, t.baseUrl, t.ownerKey);
    await page.getByRole('link', { name: 'Forms', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Forms' }).waitFor();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('lists a form with its site and count, shows its submissions, deletes one and then the form', async () => {
    const row = page.getByRole('table', { name: 'Forms' }).getByRole('row').filter({ hasText: 'contacto' });
    await row.waitFor();
    const cells = await row.getByRole('cell').allTextContents();
    expect(cells.slice(0, 3)).toEqual(['contacto', 'panaderia', '2']);
    await row.getByRole('button', { name: 'contacto', exact: true }).click();
    const subs = page.getByRole('table', { name: 'Submissions of contacto' });
    await subs.getByText('Quiero un pastel').waitFor();
    await subs.getByText('luis@example.com').waitFor();
    await subs.getByRole('button', { name: 'pastel.png (2 KB)' }).waitFor();
    await page.screenshot({ path: join(SHOTS, 'forms.png'), fullPage: true });

    page.once('dialog', (d) => d.accept());
    const anas = subs.getByRole('row').filter({ hasText: 'ana@example.com' });
    await anas.getByRole('button', { name: /^Delete the submission of / }).click();
    await anas.waitFor({ state: 'detached' });
    await row.getByRole('cell').nth(2).getByText('1').waitFor();

    page.once('dialog', (d) => d.accept());
    await row.getByRole('button', { name: 'Delete the form contacto' }).click();
    await row.waitFor({ state: 'detached' });
    const left = await callJson(t.baseUrl, 'GET', '/forms', undefined, { authorization: `Bearer ${t.ownerKey}` });
    expect(left.body.items).toEqual([]);
  });
});
