// What the console's browser tests share: Debian's Chromium started headless with the flags this
// closed network needs (no background networking), page errors logged, the screenshots' directory,
// and signing in with an API key.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { startNube, type TestNube } from '../helpers/server.js';
import { ensureConsoleBuilt } from './console-build.js';

export const SHOTS = join(import.meta.dirname, '..', '..', 'docs', 'console');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export function launchChromium(): Promise<Browser> {
  mkdirSync(SHOTS, { recursive: true });
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
}

export async function openPage(browser: Browser, viewport: { width: number; height: number }, timeoutMs: number): Promise<Page> {
  const page = await browser.newPage({ viewport });
  page.setDefaultTimeout(timeoutMs);
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
  return page;
}

/** The console's sign-in with a key, up to the overview. */
export async function signIn(page: Page, baseUrl: string, key: string): Promise<void> {
  await page.goto(`${baseUrl}/console`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
}

/** A console signed in as the owner on a fresh nube without sandboxes, with the steps pages take. */
export interface ConsoleSession {
  t: TestNube;
  page: Page;
  /** Clicks a page's link in the menu and waits for its heading. */
  go(label: string): Promise<void>;
  /** Saves the page as docs/console/<name>.png. */
  shot(name: string): Promise<unknown>;
  close(): Promise<void>;
}

export async function startConsole(): Promise<ConsoleSession> {
  await ensureConsoleBuilt();
  const t = await startNube();
  const browser = await launchChromium();
  const page = await openPage(browser, { width: 1280, height: 860 }, 20_000);
  await signIn(page, t.baseUrl, t.ownerKey);
  return {
    t,
    page,
    async go(label) {
      await page.getByRole('link', { name: label, exact: true }).click();
      await page.getByRole('heading', { level: 1, name: label }).waitFor();
    },
    shot: (name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true }),
    async close() {
      await browser.close();
      await t.close();
    },
  };
}
