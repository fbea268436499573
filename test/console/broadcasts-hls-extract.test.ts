// The console's pages for issue 34's broadcasts, HLS and extraction into a dataset, in headless
// Chromium against a real nube: a fleet agent's broadcast sent and listed with its counts; a video's
// HLS renditions started on the Files page, followed to ready, its playlist URL shown (and played by
// ffprobe); the Web page's extraction with a dataset chosen, the rows read back from the dataset.
import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newConversation } from '../../src/areas/fleet/repo.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { launchChromium, openPage, signIn } from './chromium.js';
import { ensureConsoleBuilt } from './console-build.js';

/** Three seconds of ffmpeg's test picture and tone, 640x360 H.264/AAC. */
function testVideo(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'nube-console-hls-'));
  const path = join(dir, 'clip.mp4');
  try {
    execFileSync('ffmpeg', [
      '-v', 'error', '-y',
      '-f', 'lavfi', '-i', 'testsrc=size=640x360:rate=24',
      '-f', 'lavfi', '-i', 'sine=frequency=440',
      '-t', '3', '-c:v', 'libx264', '-preset', 'ultrafast', '-c:a', 'aac', '-shortest', path,
    ]);
    return readFileSync(path);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('console: broadcasts, HLS and extraction into a dataset in Chromium', () => {
  let t: TestNube;
  let browser: Browser;
  let page: Page;
  let site: Server;
  let siteUrl: string;
  const api = async (path: string, init: RequestInit = {}) =>
    json(
      await fetch(`${t.baseUrl}/api/v2${path}`, {
        ...init,
        headers: { ...t.auth, ...(init.body ? { 'content-type': 'application/json' } : {}) },
      }),
    );
  const go = async (label: string) => {
    await page.getByRole('link', { name: label, exact: true }).click();
    await page.getByRole('heading', { level: 1, name: label }).waitFor();
  };

  beforeAll(async () => {
    await ensureConsoleBuilt();
    site = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(
        '<!doctype html><html lang="es"><head><title>Panadería Lupita</title>' +
          '<meta name="description" content="Pan dulce desde 1987"></head><body><h1>Conchas</h1></body></html>',
      );
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}/`;
    t = await startNube({ env: { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' } });
    browser = await launchChromium();
    page = await openPage(browser, { width: 1280, height: 860 }, 30_000);
    await signIn(page, t.baseUrl, t.ownerKey);
  }, 180_000);
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await new Promise((r) => site?.close(r));
  });

  it("sends a fleet agent's broadcast and lists it with its sent and failed counts", async () => {
    const fa = await api('/fleet-agents', { method: 'POST', body: JSON.stringify({ name: 'Avisos' }) });
    expect(fa.id, JSON.stringify(fa)).toBeTruthy();
    const ownerId = (await api('/account')).id;
    // Two web conversations (as the widget's first messages leave them).
    for (let i = 0; i < 2; i++)
      await t.nube.services.fleet.repo.insertConversation(newConversation({ id: fa.id, owner_id: ownerId }, `web-${randomUUID()}`));
    await go('Fleet broadcasts');
    await page.getByLabel('Fleet agent id').fill(fa.id);
    await page.getByRole('button', { name: 'Open' }).click();
    await page.getByText('Fleet agent Avisos').waitFor();
    await page.getByText('No broadcasts yet.').waitFor();
    await page.getByLabel('Message to every conversation').fill('Mañana abrimos a las 9');
    await page.getByRole('button', { name: 'Send broadcast' }).click();
    await page.getByText('Sending to 2 conversations.').waitFor();
    const row = page.getByRole('row').filter({ hasText: 'Mañana abrimos a las 9' });
    // Status, conversations, sent, failed: followed until every conversation was tried.
    await expect
      .poll(async () => (await row.getByRole('cell').allTextContents()).slice(1, 5), { timeout: 20_000 })
      .toEqual(['sent', '2', '2', '0']);
    const listed = await api(`/fleet-agents/${fa.id}/broadcasts`);
    expect(listed.items[0]).toMatchObject({ text: 'Mañana abrimos a las 9', status: 'sent', sent: 2, failed: 0 });
    // Another id says why in words.
    await page.getByLabel('Fleet agent id').fill('fa_nobody');
    await page.getByRole('button', { name: 'Open' }).click();
    await page.getByRole('alert').filter({ hasText: /not found/i }).waitFor();
  }, 60_000);

  it("starts a video's HLS renditions on the Files page, shows the progress, then the playlist URL", async () => {
    const video = testVideo();
    const created = await api('/files', {
      method: 'POST',
      body: JSON.stringify({ fileName: 'clase.mp4', contentType: 'video/mp4', size: video.byteLength }),
    });
    expect(
      (await fetch(created.putUrl, { method: 'PUT', body: video, headers: { 'content-type': 'video/mp4' } })).status,
    ).toBe(200);
    await go('Files');
    await page.getByRole('row').filter({ hasText: 'clase.mp4' }).getByRole('button', { name: 'Open' }).click();
    const hls = page.getByRole('region', { name: 'HLS streaming' });
    await hls.getByText('Status: none').waitFor();
    await hls.getByRole('button', { name: 'Make HLS renditions' }).click();
    await hls.getByText(/Status: (requested|processing|ready)/).waitFor();
    await hls.getByText('Status: ready').waitFor({ timeout: 120_000 });
    const url = (await hls.locator('code').textContent())!;
    expect(url).toMatch(/\/hls\/.+master\.m3u8$/);
    expect(await hls.textContent()).toContain('360p');
    // The URL shown is a playlist a player reads.
    const probed = JSON.parse(
      (await promisify(execFile)('ffprobe', ['-v', 'error', '-show_streams', '-of', 'json', url], { encoding: 'utf8' })).stdout,
    ) as { streams: { codec_name: string }[] };
    expect(probed.streams.map((s) => s.codec_name)).toEqual(expect.arrayContaining(['h264', 'aac']));
    // A file that is not a video has no HLS section.
    const text = await api('/files', { method: 'POST', body: JSON.stringify({ fileName: 'nota.txt', contentType: 'text/plain', size: 4 }) });
    expect((await fetch(text.putUrl, { method: 'PUT', body: 'hola', headers: { 'content-type': 'text/plain' } })).status).toBe(200);
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Files' }).waitFor();
    await page.getByRole('row').filter({ hasText: 'nota.txt' }).getByRole('button', { name: 'Open' }).click();
    await page.getByRole('region', { name: 'Preview of nota.txt' }).waitFor();
    expect(await page.getByRole('region', { name: 'HLS streaming' }).count()).toBe(0);
  }, 180_000);

  it("extracts a page's data on the Web page into the dataset chosen", async () => {
    const ds = await api('/datasets', { method: 'POST', body: JSON.stringify({ name: 'paginas' }) });
    expect(ds.id, JSON.stringify(ds)).toBeTruthy();
    await go('Web');
    await page.getByLabel('Pages to extract from (one address per line)').fill(siteUrl);
    await page.getByLabel('Source').selectOption('page');
    await page.getByLabel('Append the items to a dataset').selectOption({ label: 'paginas' });
    await page.getByRole('button', { name: 'Extract', exact: true }).click();
    await page.getByText(/: completed/).waitFor({ timeout: 30_000 });
    await page.getByText('Dataset: 1 rows added, 0 rejected').waitFor();
    expect(await page.locator('pre.extracted').textContent()).toContain('Panadería Lupita');
    const rows = await api(`/datasets/${ds.id}/query`, {
      method: 'POST',
      body: JSON.stringify({ sql: 'SELECT data FROM rows' }),
    });
    expect(JSON.stringify(rows.rows)).toContain('Panadería Lupita');
    // Without a dataset the answer only is shown; the dataset keeps its one row.
    await page.getByLabel('Append the items to a dataset').selectOption({ label: 'No dataset (only the answer)' });
    await page.getByRole('button', { name: 'Extract', exact: true }).click();
    // The new job shows queued (or running) until its first poll, a second later.
    await page.getByText(/: (queued|running)/).waitFor();
    await page.getByText(/: completed/).waitFor({ timeout: 30_000 });
    expect(await page.getByText(/rows added/).count()).toBe(0);
    const again = await api(`/datasets/${ds.id}/query`, { method: 'POST', body: JSON.stringify({ sql: 'SELECT count(*) AS n FROM rows' }) });
    expect(again.rows[0][0]).toBe(1);
  }, 90_000);
});
