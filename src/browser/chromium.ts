import type { Browser as PwBrowser, BrowserContext, Page, Route } from 'playwright-core';
import { childrenRunning, treeMemory } from './processes.js';
import {
  ASSET_ORIGIN,
  type Browser,
  type BrowserStats,
  BrowserUnavailable,
  type PdfJob,
  type RenderedPage,
  type RenderJob,
  RenderTimeout,
} from './types.js';

export interface ChromiumOptions {
  /** Debian's launcher script; it execs `realExecutable`. */
  executablePath: string;
  /** The binary the launcher runs, to find the browser's pid in /proc (memory cap, tests). */
  realExecutable?: string;
  /** Pages rendering at once; more requests wait their turn. */
  pages: number;
  /** Past this many bytes (PSS of all browser processes) the browser is restarted when idle. */
  maxMemoryBytes: number;
  log?: { warn(obj: object, msg: string): void };
}

// Flags from this project's closed network: without the background-networking ones Chromium keeps
// dialling Google and gets refused many times a second. The dead proxy is defence in depth behind the
// request interception: a request that somehow escaped it would go to a port nothing listens on, and
// `<-loopback>` removes Chromium's implicit bypass so that holds for 127.0.0.1 too.
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
  '--disable-extensions',
  '--proxy-server=http://127.0.0.1:9',
  '--proxy-bypass-list=<-loopback>',
];

const MEMORY_CHECK_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 30_000;
const ORIGIN_PREFIX = `${ASSET_ORIGIN}/`;

interface Slot {
  context: BrowserContext;
  page: Page;
  job?: PdfJob;
  /** Set when the page crashed or timed out: closed instead of going back to the pool. */
  broken?: boolean;
}

/**
 * One warm Chromium (Debian's, driven by playwright-core), launched on first use. Each page lives in
 * its own context with JavaScript off; every request it makes is intercepted: `ASSET_ORIGIN/...` is
 * answered from memory, anything else is refused before it leaves the browser.
 */
export class ChromiumBrowser implements Browser {
  private browser: PwBrowser | undefined;
  private launching: Promise<PwBrowser> | undefined;
  private readonly idle: Slot[] = [];
  private busy = 0;
  private readonly waiters: (() => void)[] = [];
  private launches = 0;
  private renders = 0;
  private memoryBytes = 0;
  private lastMemoryCheck = 0;
  private restartWhenIdle = false;
  private checking = false;
  private closed = false;
  private browserPid: number | undefined;

  constructor(private readonly opts: ChromiumOptions) {}

  async pdf(job: PdfJob): Promise<Buffer> {
    const slot = await this.acquire();
    const timeout = job.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    try {
      slot.job = job;
      slot.page.setDefaultTimeout(timeout);
      const pdf = await withDeadline(
        timeout,
        () => slot.context.close().catch(() => {}),
        async () => {
          // setContent, not a navigation to ASSET_ORIGIN: each navigation to a new site swapped the
          // renderer process and cost ~90 ms of a ~170 ms export. A <base> makes relative URLs resolve
          // at ASSET_ORIGIN, where the route below answers them.
          await slot.page.setContent(withBase(job.html), { waitUntil: 'load', timeout });
          return slot.page.pdf({ format: job.format, printBackground: true });
        },
      );
      this.renders += 1;
      return pdf;
    } catch (err) {
      slot.broken = true;
      throw err;
    } finally {
      slot.job = undefined;
      this.release(slot);
    }
  }

  /**
   * A page with JavaScript on: a fresh context (no cookies, storage or cache from any other render, all
   * gone when it closes), every request it makes answered by `job.fetch` (nube's outbound guard) within
   * a byte budget, nothing fetched by Chromium itself. The DOM is read once the network is quiet for
   * half a second, or at the deadline.
   */
  async render(job: RenderJob): Promise<RenderedPage> {
    if (this.closed) throw new Error('the browser is closed');
    while (this.busy >= this.opts.pages) await new Promise<void>((r) => this.waiters.push(r));
    this.busy += 1;
    let context: BrowserContext | undefined;
    let left = job.maxBytes;
    let requests = 0;
    let refused = 0;
    try {
      const browser = await this.ensureBrowser();
      context = await browser.newContext({ javaScriptEnabled: true, serviceWorkers: 'block', acceptDownloads: false });
      await context.route('**/*', async (route) => {
        const r = route.request();
        requests += 1;
        try {
          if (left <= 0) throw new Error('byte budget spent');
          const a = await job.fetch({ url: r.url(), method: r.method(), headers: await r.allHeaders(), body: r.postDataBuffer() }, left);
          left -= a.body.length;
          await route.fulfill({ status: a.status, headers: a.headers, body: a.body });
        } catch {
          refused += 1;
          await route.abort('blockedbyclient').catch(() => {});
        }
      });
      const ctx = context;
      const page = await ctx.newPage();
      const out = await withDeadline(
        job.timeoutMs,
        () => ctx.close().catch(() => {}),
        async () => {
          await page.goto(job.url, { waitUntil: 'load', timeout: job.timeoutMs });
          // Scripts that fetch after load get until the network is quiet (or the deadline).
          await page.waitForLoadState('networkidle', { timeout: Math.max(1, job.timeoutMs / 2) }).catch(() => {});
          return { url: page.url(), html: await page.content() };
        },
      );
      this.renders += 1;
      return { ...out, requests, refused };
    } finally {
      await context?.close().catch(() => {});
      this.busy -= 1;
      this.checkMemory();
      if (this.restartWhenIdle && this.busy === 0) this.restart();
      this.waiters.shift()?.();
    }
  }

  stats(): BrowserStats & { pid?: number } {
    return {
      running: this.browser?.isConnected() ?? false,
      launches: this.launches,
      renders: this.renders,
      pagesIdle: this.idle.length,
      pagesBusy: this.busy,
      memoryBytes: this.memoryBytes,
      pid: this.browserPid,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    const b = this.browser ?? (await this.launching?.catch(() => undefined));
    this.browser = undefined;
    this.idle.length = 0;
    await b?.close().catch(() => {});
  }

  private async acquire(): Promise<Slot> {
    if (this.closed) throw new Error('the browser is closed');
    while (this.busy >= this.opts.pages) await new Promise<void>((r) => this.waiters.push(r));
    this.busy += 1;
    try {
      const browser = await this.ensureBrowser();
      const ready = this.idle.pop();
      if (ready && !ready.page.isClosed()) return ready;
      return await this.newSlot(browser);
    } catch (err) {
      this.busy -= 1;
      this.waiters.shift()?.();
      throw err;
    }
  }

  private release(slot: Slot): void {
    this.busy -= 1;
    if (slot.broken || !this.browser?.isConnected() || this.restartWhenIdle)
      void slot.context.close().catch(() => {});
    else this.idle.push(slot);
    this.checkMemory();
    if (this.restartWhenIdle && this.busy === 0) this.restart();
    this.waiters.shift()?.();
  }

  private ensureBrowser(): Promise<PwBrowser> {
    if (this.browser?.isConnected()) return Promise.resolve(this.browser);
    this.launching ??= this.launch().finally(() => {
      this.launching = undefined;
    });
    return this.launching;
  }

  private async launch(): Promise<PwBrowser> {
    const before = new Set(await this.findPids());
    // Loaded on the first render, not at start: playwright-core is the costliest module nube imports
    // (about 0.6 s of CPU, a fifth of a built nube's start-up; docs/benchmarks.md, startup).
    const { chromium } = await import('playwright-core');
    const b = await chromium
      .launch({ executablePath: this.opts.executablePath, headless: true, args: ARGS })
      .catch((e: Error) => {
        throw new BrowserUnavailable(
          `chromium (${this.opts.executablePath}) did not start: ${e.message.split('\n')[0]}`,
        );
      });
    this.launches += 1;
    this.idle.length = 0;
    this.browserPid = (await this.findPids()).find((p) => !before.has(p));
    b.on('disconnected', () => {
      // A crash or a kill: the next render launches a new one.
      if (this.browser === b) {
        this.browser = undefined;
        this.idle.length = 0;
        if (!this.closed)
          this.opts.log?.warn(
            { pid: this.browserPid },
            'chromium went away; the next render starts a new one',
          );
      }
    });
    if (this.closed) {
      await b.close();
      throw new Error('the browser is closed');
    }
    this.browser = b;
    return b;
  }

  private findPids(): Promise<number[]> {
    return childrenRunning(process.pid, this.opts.realExecutable ?? '/usr/lib/chromium/chromium');
  }

  private async newSlot(browser: PwBrowser): Promise<Slot> {
    const context = await browser.newContext({
      javaScriptEnabled: false,
      serviceWorkers: 'block',
      acceptDownloads: false,
    });
    const page = await context.newPage();
    const slot: Slot = { context, page };
    page.on('crash', () => {
      slot.broken = true;
    });
    await context.route('**/*', (route) => this.answer(slot, route));
    return slot;
  }

  private async answer(slot: Slot, route: Route): Promise<void> {
    const url = route.request().url();
    const job = slot.job;
    try {
      if (!job || !url.startsWith(ORIGIN_PREFIX)) return await route.abort('blockedbyclient');
      const path = decodeURIComponent(new URL(url).pathname.slice(1));
      const asset = job.asset ? await job.asset(path) : null;
      if (!asset) return await route.fulfill({ status: 404, contentType: 'text/plain', body: 'not found' });
      return await route.fulfill({ status: 200, contentType: asset.contentType, body: asset.body });
    } catch {
      // The page went away (closed, timed out) while the asset was read: nothing to answer.
      await route.abort('failed').catch(() => {});
    }
  }

  /** Measures the browser now and then, in the background; past the cap it restarts once idle. */
  private checkMemory(): void {
    const now = Date.now();
    const pid = this.browserPid;
    if (pid === undefined || this.checking || now - this.lastMemoryCheck < MEMORY_CHECK_MS) return;
    this.lastMemoryCheck = now;
    this.checking = true;
    treeMemory(pid)
      .then((bytes) => {
        this.memoryBytes = bytes;
        if (bytes > this.opts.maxMemoryBytes && !this.restartWhenIdle && pid === this.browserPid) {
          this.opts.log?.warn(
            { memoryBytes: bytes, cap: this.opts.maxMemoryBytes },
            'chromium is over its memory cap; restarting it',
          );
          this.restartWhenIdle = true;
          if (this.busy === 0) this.restart();
        }
      })
      .catch(() => {})
      .finally(() => {
        this.checking = false;
      });
  }

  /** Closes the browser once nothing renders; the next render launches a fresh one. */
  private restart(): void {
    this.restartWhenIdle = false;
    const b = this.browser;
    this.browser = undefined;
    this.idle.length = 0;
    void b?.close().catch(() => {});
  }
}

/** The document with `<base href="ASSET_ORIGIN/">` first in its head (before any base of its own). */
export function withBase(html: string): string {
  const base = `<base href="${ORIGIN_PREFIX}">`;
  const head = /<head(\s[^>]*)?>/i.exec(html);
  if (head)
    return html.slice(0, head.index + head[0].length) + base + html.slice(head.index + head[0].length);
  return base + html;
}

/** Runs `work`; past `ms` calls `abandon` (which makes `work` fail) and rejects with a timeout. */
async function withDeadline<T>(ms: number, abandon: () => unknown, work: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      abandon();
      reject(new RenderTimeout(`rendering took longer than ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([work(), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
