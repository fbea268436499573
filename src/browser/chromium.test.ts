import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPaper, pdfInfo, pdfPngs, pdfText } from '../../test/helpers/pdf.js';
import { ChromiumBrowser } from './chromium.js';
import { BrowserUnavailable, RenderTimeout } from './types.js';

const doc = (body: string) =>
  `<!doctype html><html lang="es"><head><meta charset="utf-8"><style>section{break-after:page}</style></head><body>${body}</body></html>`;

describe('ChromiumBrowser', () => {
  let browser: ChromiumBrowser;
  let server: Server;
  let hits: string[];
  let internal: string;
  beforeAll(async () => {
    browser = new ChromiumBrowser({
      executablePath: '/usr/bin/chromium',
      pages: 2,
      maxMemoryBytes: 4 * 1024 ** 3,
    });
    hits = [];
    // Stands for an internal service a document must not be able to reach through the browser.
    server = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('secret');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    internal = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await browser?.close();
    server?.close();
  });

  it('renders pages of the asked size with Spanish text intact', async () => {
    const html = doc(
      '<section><h1>¿Qué tal, señor Muñoz?</h1><p>¡Año nuevo! Acción, pingüino, útil.</p></section><section><p>Segunda página</p></section>',
    );
    const a4 = await browser.pdf({ html, format: 'A4' });
    expect(a4.subarray(0, 5).toString()).toBe('%PDF-');
    const a4Info = await pdfInfo(a4);
    expect(a4Info.pages).toBe(2);
    expect(isPaper(a4Info, 'A4'), JSON.stringify(a4Info)).toBe(true);
    const text = await pdfText(a4);
    expect(text[0]).toContain('¿Qué tal, señor Muñoz?');
    expect(text[0]).toContain('¡Año nuevo! Acción, pingüino, útil.');
    expect(text[1]).toContain('Segunda página');
    const letter = await browser.pdf({ html, format: 'Letter' });
    const letterInfo = await pdfInfo(letter);
    expect(letterInfo.pages).toBe(2);
    expect(isPaper(letterInfo, 'Letter'), JSON.stringify(letterInfo)).toBe(true);
  });

  it('runs no JavaScript', async () => {
    const pdf = await browser.pdf({
      html: doc(
        '<p id="t">static</p><script>document.getElementById("t").textContent = "script ran"</script>',
      ),
      format: 'A4',
    });
    const text = (await pdfText(pdf)).join('');
    expect(text).toContain('static');
    expect(text).not.toContain('script ran');
  });

  it('serves its own assets and refuses every other request', async () => {
    const red = await sharp({
      create: { width: 40, height: 40, channels: 3, background: { r: 255, g: 0, b: 0 } },
    })
      .png()
      .toBuffer();
    const asked: string[] = [];
    const html = doc(
      `<img src="assets/red.png" style="width:300px;height:300px">` +
        `<img src="${internal}/img"><link rel="stylesheet" href="${internal}/css">` +
        `<iframe src="${internal}/frame"></iframe><div style="background:url(${internal}/bg)">x</div>` +
        `<object data="${internal}/object"></object><video poster="${internal}/poster"></video>` +
        `<img src="http://localhost:${new URL(internal).port}/by-name">`,
    );
    const pdf = await browser.pdf({
      html,
      format: 'A4',
      asset: async (path) => {
        asked.push(path);
        return path === 'assets/red.png' ? { body: red, contentType: 'image/png' } : null;
      },
    });
    expect(hits).toEqual([]);
    expect(asked).toEqual(['assets/red.png']);
    // The served image is really on the page: a red area at the top left.
    const [png] = await pdfPngs(pdf, 40);
    const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
    const at = (x: number, y: number) => [
      ...data.subarray((y * info.width + x) * info.channels, (y * info.width + x) * info.channels + 3),
    ];
    expect(at(40, 40)).toEqual([255, 0, 0]);
  });

  it('renders concurrently through its pool of pages', async () => {
    const pdfs = await Promise.all(
      Array.from({ length: 5 }, (_, i) => browser.pdf({ html: doc(`<p>documento ${i}</p>`), format: 'A5' })),
    );
    for (const [i, pdf] of pdfs.entries()) expect((await pdfText(pdf)).join('')).toContain(`documento ${i}`);
    expect(browser.stats().pagesBusy).toBe(0);
    expect(browser.stats().pagesIdle).toBeLessThanOrEqual(2);
  });

  it('starts a new browser after the old one was killed', async () => {
    await browser.pdf({ html: doc('<p>antes</p>'), format: 'A4' });
    const { pid, launches } = browser.stats();
    expect(pid).toBeGreaterThan(0);
    process.kill(pid as number, 'SIGKILL');
    await expect.poll(() => browser.stats().running, { timeout: 10_000 }).toBe(false);
    const pdf = await browser.pdf({ html: doc('<p>después</p>'), format: 'A4' });
    expect((await pdfText(pdf)).join('')).toContain('después');
    expect(browser.stats().launches).toBe(launches + 1);
    expect(browser.stats().pid).not.toBe(pid);
  });

  it('restarts a browser that went over its memory cap', async () => {
    const small = new ChromiumBrowser({
      executablePath: '/usr/bin/chromium',
      pages: 1,
      maxMemoryBytes: 1024 * 1024,
    });
    try {
      await small.pdf({ html: doc('<p>uno</p>'), format: 'A4' });
      // Measured in the background after the export, then closed since nothing renders.
      await expect.poll(() => small.stats().running, { timeout: 10_000 }).toBe(false);
      expect(small.stats().memoryBytes).toBeGreaterThan(1024 * 1024);
      await small.pdf({ html: doc('<p>dos</p>'), format: 'A4' });
      expect(small.stats().launches).toBe(2);
    } finally {
      await small.close();
    }
  });

  it('gives up on a render past its deadline and keeps serving the next ones', async () => {
    const stuck = browser.pdf({
      html: doc('<p>espera</p><img src="assets/never.png">'),
      format: 'A4',
      timeoutMs: 1500,
      asset: () => new Promise(() => {}),
    });
    await expect(stuck).rejects.toBeInstanceOf(RenderTimeout);
    const pdf = await browser.pdf({ html: doc('<p>sigue</p>'), format: 'A4' });
    expect((await pdfText(pdf)).join('')).toContain('sigue');
  });

  it('says the browser is unavailable when it cannot start', async () => {
    const missing = new ChromiumBrowser({
      executablePath: '/nonexistent/chromium',
      pages: 1,
      maxMemoryBytes: 1024 ** 3,
    });
    await expect(missing.pdf({ html: doc('<p>x</p>'), format: 'A4' })).rejects.toBeInstanceOf(
      BrowserUnavailable,
    );
    await missing.close();
  });
});
