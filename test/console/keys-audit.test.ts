// The console's API keys page with scopes and its audit log page, in headless Chromium against a real
// nube: an owner makes a scoped key from the scope catalogue's checkboxes with an expiry, caps and an
// address, sees its scope and limits listed, and the key does exactly that; the audit page lists the
// changes and the refusal, filters them by operation, key, resource and time, and pages by cursor.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, json, type TestNube } from '../helpers/server.js';
import { type ConsoleSession, startConsole } from './chromium.js';

describe('console pages for scoped keys and the audit log in Chromium', () => {
  let c: ConsoleSession;
  let t: TestNube;
  let page: Page;
  let call: ReturnType<typeof caller>;
  let scopedId: string;
  let scopedSecret: string;
  const go = (label: string) => c.go(label);
  const shot = (name: string) => c.shot(name);

  beforeAll(async () => {
    c = await startConsole();
    ({ t, page } = c);
    call = caller(t);
  }, 180_000);
  afterAll(async () => {
    await c?.close();
  });

  it('makes a scoped key from checkboxes with expiry, caps and an address, and lists its scope', async () => {
    await go('API keys');
    await page.getByLabel('Name').fill('reader');
    await page.getByLabel('Scoped (only what is ticked below)').check();
    // The checkboxes come from GET /account/scopes: every area of the registry, read and write.
    const areas = (await json(await call('GET', '/account/scopes'))).areas as { area: string; read: string[]; write: string[] }[];
    expect(areas.map((a) => a.area)).toEqual(expect.arrayContaining(['account', 'databases', 'sandboxes', 'agents']));
    for (const a of areas.filter((x) => x.read.length)) await page.getByRole('checkbox', { name: `${a.area}:read`, exact: true }).waitFor();
    await page.getByRole('checkbox', { name: 'account:read', exact: true }).check();
    await page.getByRole('checkbox', { name: 'databases:read', exact: true }).check();
    const expires = new Date(Date.now() + 7 * 86_400_000);
    const local = new Date(expires.getTime() - expires.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await page.getByLabel('Expires').fill(local);
    await page.getByLabel('LLM tokens').fill('5000');
    await page.getByLabel('Sandbox CPU seconds').fill('60');
    await page.getByLabel('Allowed addresses').fill('127.0.0.1');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('it is shown once').waitFor();
    scopedSecret = (await page.locator('.secret').textContent())!;
    expect(scopedSecret).toMatch(/^nube_sk_live_/);
    const row = page.getByRole('row').filter({ hasText: 'reader' });
    await row.waitFor();
    expect(await row.getByRole('cell').nth(2).textContent()).toBe('account:read, databases:read');
    const limits = await row.getByRole('cell').nth(3).textContent();
    expect(limits).toContain('expires');
    expect(limits).toContain('5,000 tokens/month');
    expect(limits).toContain('60 CPU s/month');
    expect(limits).toContain('from 127.0.0.1');
    expect(await page.getByRole('row').filter({ hasText: 'default' }).getByRole('cell').nth(2).textContent()).toBe('Full access');
    await shot('api-keys-scoped');
    // The key is what the form said.
    const key = (await json(await call('GET', '/account/keys'))).items.find((k: { name: string }) => k.name === 'reader');
    scopedId = key.id;
    expect(key.scopes).toEqual(['account:read', 'databases:read']);
    expect(key.caps).toEqual({ llmTokens: 5000, sandboxCpuSeconds: 60 });
    expect(key.allowedIps).toEqual(['127.0.0.1']);
    expect(Math.abs(Date.parse(key.expiresAt) - expires.getTime())).toBeLessThan(60_000);
    expect((await call('GET', '/databases', undefined, scopedSecret)).status).toBe(200);
    expect((await call('POST', '/databases', { name: 'nope' }, scopedSecret)).status).toBe(403);
  }, 60_000);

  it('refuses a fractional cap in the form, and the API says why for what the form lets through', async () => {
    const before = (await json(await call('GET', '/account/keys'))).items.length;
    await page.getByLabel('Name').fill('fraction');
    await page.getByLabel('Scoped (only what is ticked below)').check();
    await page.getByRole('checkbox', { name: 'account:read', exact: true }).check();
    await page.getByLabel('LLM tokens').fill('1.5');
    await page.getByRole('button', { name: 'Create key' }).click();
    expect(await page.getByLabel('LLM tokens').evaluate((e) => (e as unknown as { validity: { valid: boolean } }).validity.valid)).toBe(false);
    await page.getByLabel('LLM tokens').fill('');
    await page.getByLabel('Allowed addresses').fill('not-an-address');
    await page.getByRole('button', { name: 'Create key' }).click();
    await expect.poll(() => page.getByRole('alert').first().textContent()).toContain('allowedIps');
    expect((await json(await call('GET', '/account/keys'))).items.length).toBe(before);
  }, 60_000);

  it('lists audit entries, filters them by operation, key, resource and time, and pages by cursor', async () => {
    const db = await json(await call('POST', '/databases', { name: 'audited' }));
    // Enough changes for more than one page of 25.
    for (let i = 0; i < 26; i++) expect((await call('POST', '/account/keys', { name: `bulk-${i}` })).status).toBe(201);
    await go('Audit log');
    const rows = page.locator('table tbody tr');
    await expect.poll(() => rows.count()).toBe(25);
    await page.getByRole('button', { name: 'Next →' }).click();
    await page.getByText('Page 2').waitFor();
    await expect.poll(() => rows.count()).toBeGreaterThan(0);
    const second = await rows.allTextContents();
    await page.getByRole('button', { name: '← Previous' }).click();
    await page.getByText('Page 1').waitFor();
    await expect.poll(async () => (await rows.allTextContents())[0] !== second[0]).toBe(true);
    // By operation.
    await page.getByLabel('Operation', { exact: true }).fill('databases.create');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(async () => (await rows.allTextContents()).every((r) => r.includes('databases.create'))).toBe(true);
    await expect.poll(() => rows.count()).toBe(2); // the owner's create and the scoped key's refusal
    // By key: the scoped key's refused create, 403 ScopeMissing.
    await page.getByLabel('Key', { exact: true }).selectOption(scopedId);
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('403 ScopeMissing');
    expect(await rows.first().textContent()).toContain('reader');
    await shot('audit');
    // By resource.
    await page.getByRole('button', { name: 'Clear' }).click();
    await page.getByLabel('Resource', { exact: true }).fill(db.id);
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('databases.create');
    // By time: nothing happened after tomorrow, everything before it.
    await page.getByRole('button', { name: 'Clear' }).click();
    const tomorrow = new Date(Date.now() + 86_400_000 - new Date().getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await page.getByLabel('From', { exact: true }).fill(tomorrow);
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByText('No entries match.').waitFor();
    await page.getByRole('button', { name: 'Clear' }).click();
    await page.getByLabel('To', { exact: true }).fill(tomorrow);
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => rows.count()).toBe(25);
  }, 90_000);
});
