// What the console's browser tests share: Debian's Chromium started headless with the flags this
// closed network needs (no background networking), page errors logged, the screenshots' directory,
// and signing in with an API key.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';

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
