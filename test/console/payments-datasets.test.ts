// The console's payment links and datasets pages in headless Chromium against a real nube: make a
// payment link and see it listed with its page's URL; make a dataset, fill it through the API and read
// it with SQL on the page.
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { launchChromium, openPage, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

describe('console pages for payment links and datasets in Chromium', () => {
  let t: TestNube;
  let browser: Browser;
  let page: Page;
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

  it('makes a payment link and lists it with its page', async () => {
    await go('Payment links');
    await page.getByLabel('Amount (MXN)').fill('250.50');
    await page.getByLabel('What it is for (the payer sees it)').fill('Clase de cerámica');
    await page.getByRole('button', { name: 'Create link' }).click();
    const row = page.getByRole('row').filter({ hasText: 'Clase de cerámica' });
    await row.waitFor();
    expect(await row.getByRole('cell').nth(1).textContent()).toBe('$250.50 MXN');
    expect(await row.getByRole('cell').nth(2).textContent()).toBe('0 of 1');
    const href = await row.getByRole('link').getAttribute('href');
    const payPage = await fetch(href!);
    expect(payPage.status).toBe(200);
    expect(await payPage.text()).toContain('$250.50 MXN');
    await row.getByRole('button', { name: 'Payments' }).click();
    await page.getByText('No payments yet.').waitFor();
  }, 60_000);

  it('makes a dataset and reads it with SQL', async () => {
    await go('Datasets');
    await page.getByLabel('New dataset').fill('precios');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const row = page.getByRole('row').filter({ hasText: 'precios' });
    await row.waitFor();
    const id = (
      (await json(await fetch(`${t.baseUrl}/api/v2/datasets`, { headers: t.auth }))).items as {
        id: string;
        name: string;
      }[]
    ).find((d) => d.name === 'precios')!.id;
    await t.nube.services.datasets.append(
      (await json(await fetch(`${t.baseUrl}/api/v2/account`, { headers: t.auth }))).id,
      id,
      [{ data: { pan: 'concha', mxn: 18 } }],
      null,
    );
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Datasets' }).waitFor();
    await page.getByRole('row').filter({ hasText: 'precios' }).getByRole('button', { name: 'Query' }).click();
    await page.getByLabel('Read-only SQL (table rows, view items)').fill('SELECT pan, mxn FROM items');
    await page.getByRole('button', { name: 'Run' }).click();
    await page.getByRole('cell', { name: 'concha' }).waitFor();
    await page.getByLabel('Read-only SQL (table rows, view items)').fill('DELETE FROM rows');
    await page.getByRole('button', { name: 'Run' }).click();
    await page.getByText('only statements that read are allowed').waitFor();
  }, 60_000);
});
