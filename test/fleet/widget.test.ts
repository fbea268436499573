// The web channel's widget in headless Chromium (Debian's, through playwright-core), on SQLite and
// PostgreSQL: a page on another origin embeds /fleet-widget.js; a message typed there streams its reply
// from a real box; reloading the page reads the conversation back with a public key.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FleetNube, startFleetNube } from './helpers.js';

describe.each(DIALECTS)('fleet: web widget (%s)', (dialect) => {
  let t: FleetNube;
  let browser: Browser;
  let site: Server;
  let siteUrl: string;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    t = await startFleetNube(`widget-${dialect}`, { dialect });
    fa = await t.fleetAgent({ name: 'Web' });
    site = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(`<!doctype html><html><body><h1>Tienda</h1><script src="${t.baseUrl}/fleet-widget.js" data-fleet-agent="${fa.id}" data-token="${fa.token}"></script></body></html>`);
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    // Another origin than nube's (localhost vs 127.0.0.1): the widget's requests are cross-origin.
    siteUrl = `http://localhost:${(site.address() as AddressInfo).port}/`;
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await new Promise((r) => site?.close(r));
    await t?.stop();
  }, 60_000);

  it('sends from the page, streams the reply, and reads the conversation back after a reload', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const failures: string[] = [];
    page.on('pageerror', (e) => failures.push(e.message));
    await page.goto(siteUrl);
    await page.locator('.nube-fleet-input').fill('hola desde la web');
    await page.locator('.nube-fleet-form button').click();
    // The turn's end (`done`, after its reply is stored) marks the message with its turn id.
    await expect.poll(() => page.locator('.nube-fleet-assistant[data-turn-id]').allTextContents(), { timeout: 60_000 }).toEqual(['echo: hola desde la web']);
    const groupId = await page.evaluate<string | null>(`localStorage.getItem('nube-fleet:${fa.id}')`);
    expect(groupId).toMatch(/^web-[0-9a-f-]{36}$/);
    await page.reload();
    await expect.poll(() => page.locator('.nube-fleet-msg').allTextContents(), { timeout: 20_000 }).toEqual(['hola desde la web', 'echo: hola desde la web']);
    expect(failures).toEqual([]);
    const msgs = await t.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${groupId}`, undefined, fa.token);
    expect(msgs.body.items).toHaveLength(2);
    await context.close();
  }, 120_000);
});
