// The console's Documents page with a prompt, in headless Chromium against a real nube whose LLM is a
// local server speaking OpenAI's protocol: the list says the pages are being written, then shows them
// (and the site has them); an upstream refusal shows in words in the list; editing the prompt writes
// the pages again.
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { startNube, type TestNube } from '../helpers/server.js';
import { siteRequest } from '../helpers/site.js';
import { launchChromium, openPage, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

const pages = (...headings: string[]) =>
  JSON.stringify({ sections: headings.map((h) => ({ heading: h, body: `Todo sobre **${h.toLowerCase()}**.` })) });

describe('console: a document written from a prompt', () => {
  let t: TestNube;
  let stub: LlmStub;
  let browser: Browser;
  let page: Page;
  const row = (name: string) => page.getByRole('row').filter({ hasText: name });

  beforeAll(async () => {
    await ensureConsoleBuilt();
    stub = await startLlmStub();
    t = await startNube({
      env: { NUBE_OWNER_PLAN: 'mega', NUBE_LLM_BASE_URL: stub.url, NUBE_LLM_API_KEY: 'sk-operator', NUBE_LLM_MODEL: 'op-model', NUBE_LLM_GATEWAY_PORT: '0' },
    });
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
    await signIn(page, t.baseUrl, t.ownerKey);
    await page.getByRole('link', { name: 'Documents', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Documents' }).waitFor();
  }, 180_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await stub?.close();
  });

  it('shows the pages being written, then the pages; the site has them', async () => {
    // The LLM takes a moment, so the list is seen while the pages are being written.
    stub.push({ content: pages('Horarios', 'Ubicación'), delayMs: 2500 });
    await page.getByLabel('Name', { exact: true }).fill('Café Nube');
    await page.getByLabel(/Describe it, and an LLM/).fill('Una página para un café: horarios y cómo llegar');
    await page.getByRole('button', { name: 'Create document' }).click();
    await page.getByText('An LLM is writing the pages of Café Nube').waitFor();
    await row('Café Nube').getByText('writing pages…').waitFor();
    // Followed without a reload until done.
    await row('Café Nube').getByText('draft').waitFor({ timeout: 20_000 });
    expect(await row('Café Nube').getByRole('cell').nth(2).textContent()).toBe('2');
    expect(JSON.stringify(stub.requests.at(-1)!.body.messages)).toContain('horarios y cómo llegar');
    await row('Café Nube').getByRole('button', { name: 'Deploy as a site' }).click();
    const link = page.getByRole('link', { name: 'open the site', exact: true });
    await link.waitFor();
    const home = await siteRequest((await link.getAttribute('href'))!, t.baseUrl, '/');
    expect(home.status).toBe(200);
    expect(home.text).toContain('<strong>horarios</strong>');
  }, 60_000);

  it("says in words why the pages could not be written; an edited prompt writes them again", async () => {
    stub.push({ status: 400, content: 'prompt refused by policy' });
    await page.getByLabel('Name', { exact: true }).fill('Rechazado');
    await page.getByLabel(/Describe it, and an LLM/).fill('algo que el modelo rechaza');
    await page.getByRole('button', { name: 'Create document' }).click();
    await row('Rechazado').getByText(/Writing the pages failed: .*prompt refused by policy/).waitFor({ timeout: 20_000 });

    stub.push({ content: pages('Menú') });
    await row('Rechazado').getByRole('button', { name: 'Edit' }).click();
    const prompt = page.getByLabel(/Describe it, and an LLM/);
    expect(await prompt.inputValue()).toBe('algo que el modelo rechaza');
    await prompt.fill('un menú de desayunos');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await row('Rechazado').getByText('draft').waitFor({ timeout: 20_000 });
    await expect.poll(async () => row('Rechazado').getByRole('cell').nth(2).textContent(), { timeout: 20_000 }).toBe('1');
    expect(await row('Rechazado').getByText(/Writing the pages failed/).count()).toBe(0);
    expect(JSON.stringify(stub.requests.at(-1)!.body.messages)).toContain('un menú de desayunos');
  }, 60_000);
});
