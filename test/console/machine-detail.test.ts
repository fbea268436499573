// The console's page of one machine, in headless Chromium against a nube with real sandboxes: set a
// secret (the app restarts with it; the value never comes back to the page), see a backup of its data
// paths taken on the timer and restore it (the file comes back). A screenshot goes to docs/console/.
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunning, type MachineNube, nodeApp, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing, writeApp } from '../machines/helpers.js';
import { launchChromium, openPage, SHOTS, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

describe("console: one machine's secrets and backups in Chromium", () => {
  let t: MachineNube;
  let browser: Browser;
  let page: Page;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let m: any;
  const exec = async (command: string) => (await t.call('POST', `/sandboxes/${m.sandboxId}/exec`, { command })).body;

  beforeAll(async () => {
    await ensureConsoleBuilt();
    t = await startMachineNube('console', 'sqlite', { NUBE_MACHINE_BACKUP_INTERVAL_S: '5' });
    m = await createRunning(t, { tier: 'small', name: 'tienda' });
    await writeApp(t, m.sandboxId, nodeApp('1', { '/app/nube.json': JSON.stringify({ start: 'node server.js', port: 8080, dataPaths: ['/data'] }) }));
    await exec('mkdir -p /data && echo v1 > /data/note.txt');
    expect((await t.call('POST', `/machines/${m.id}/restart`)).status).toBe(200);
    m = (await t.call('GET', `/machines/${m.id}`)).body;
    await waitServing(t, m.url);
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 1000 }, 30_000);
    await signIn(page, t.baseUrl, t.ownerKey);
    await page.getByRole('link', { name: 'Machines', exact: true }).click();
    await page.getByRole('link', { name: 'tienda', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Machine tienda' }).waitFor();
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await browser?.close();
    if (t) await stopMachineNube(t);
  }, 120_000);

  it('sets a secret: the app restarts with it, the page lists its name and never its value', async () => {
    await page.getByLabel('Name', { exact: true }).fill('SECRET_TOKEN');
    await page.getByLabel('Value', { exact: true }).fill('s3cr3t-valor');
    await page.getByRole('button', { name: 'Set secret' }).click();
    await page.getByText('SECRET_TOKEN is set; the app restarted with it.').waitFor();
    const row = page.getByRole('table', { name: 'Secrets' }).getByRole('row').filter({ hasText: 'SECRET_TOKEN' });
    expect(await row.getByRole('cell').allTextContents()).toEqual(['SECRET_TOKEN', 'stored (encrypted)', 'has it']);
    await waitServing(t, m.url, (b) => JSON.parse(b).secretLength === 's3cr3t-valor'.length);
    expect(await page.content()).not.toContain('s3cr3t-valor');
    // Without the restart: the page says the value waits for the next one, and so does the machine.
    await page.getByLabel('Restart the app now to apply').uncheck();
    await page.getByLabel('Name', { exact: true }).fill('OTRO');
    await page.getByLabel('Value', { exact: true }).fill('x');
    await page.getByRole('button', { name: 'Set secret' }).click();
    await page.getByText('OTRO is set; the app gets it at its next restart.').waitFor();
    await page.getByText('secrets wait for a restart').waitFor();
    const otro = page.getByRole('table', { name: 'Secrets' }).getByRole('row').filter({ hasText: 'OTRO' });
    expect(await otro.getByRole('cell').allTextContents()).toEqual(['OTRO', 'stored (encrypted)', 'gets it at the next restart']);
    expect((await t.call('GET', `/machines/${m.id}/secrets`)).body.inVault.sort()).toEqual(['OTRO', 'SECRET_TOKEN']);
    // A bad name is refused in words before anything is sent.
    await page.getByLabel('Name', { exact: true }).fill('1BAD');
    await page.getByRole('button', { name: 'Set secret' }).click();
    expect(await page.getByLabel('Name', { exact: true }).evaluate((el) => (el as unknown as { validity: { valid: boolean } }).validity.valid)).toBe(false);
    await page.getByLabel('Name', { exact: true }).fill('');
  });

  it('lists the backup the timer took and restores it: the data comes back', async () => {
    const row = page.getByRole('table', { name: 'Backups' }).getByRole('row').filter({ hasText: 'completed' }).first();
    for (const end = Date.now() + 60_000; !(await row.isVisible()) && Date.now() < end; ) {
      await page.getByRole('button', { name: 'Refresh backups' }).click();
      await page.waitForTimeout(1000);
    }
    expect(await row.getByRole('cell').nth(2).textContent()).toBe('/data');
    expect(await row.getByRole('cell').nth(4).textContent()).toBe('consistent (app-paused)');
    await page.screenshot({ path: join(SHOTS, 'machine.png'), fullPage: true });
    await exec('echo v2 > /data/note.txt');
    page.once('dialog', (d) => d.accept());
    await row.getByRole('button', { name: 'Restore' }).click();
    await page.getByText('Restored /data; the app started again.').waitFor({ timeout: 60_000 });
    expect((await exec('cat /data/note.txt')).stdout).toBe('v1\n');
  });
});
