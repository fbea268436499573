// HTML parsing (linkedom, Readability, turndown) costs ~22 ms per 30 KB page and ~0.6 s at the 5 MB
// fetch cap: on nube's event loop it would stall every other request meanwhile. A few long-lived child
// processes do it instead (worker threads cannot load the TypeScript sources under vitest or a plain
// node parent here). Each runs one parse at a time; a parse past its time limit kills its process, and
// a process that dies fails only the parse it was running. Processes start on first use.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ParsedPage, StructuredPage } from './html.js';
import type { FeedItem, SitemapResult } from './xml-sources.js';

export type ParseRequest =
  | { id: number; kind: 'page'; html: string; url: string; markdown: boolean }
  | { id: number; kind: 'structured'; html: string; url: string }
  | { id: number; kind: 'sitemap' | 'feed'; xml: string; url: string };
export type ParseResponse =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: string }
  /** Sent once at start: the time limit counts parsing, not the process's start. */
  | { ready: true };

const isTs = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(`./parser-main.${isTs ? 'ts' : 'js'}`, import.meta.url));

type Job = { req: ParseRequest; resolve: (v: unknown) => void; reject: (e: Error) => void };

interface Worker {
  child: ChildProcess;
  ready: boolean;
  job: Job | null;
  timer: NodeJS.Timeout | null;
}

export class ParserPool {
  private readonly workers: Worker[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly size: number,
    private readonly timeoutMs: number,
  ) {}

  parsePage(html: string, url: string, markdown: boolean): Promise<ParsedPage> {
    return this.run({ id: this.nextId++, kind: 'page', html, url, markdown }) as Promise<ParsedPage>;
  }

  parseStructured(html: string, url: string): Promise<StructuredPage> {
    return this.run({ id: this.nextId++, kind: 'structured', html, url }) as Promise<StructuredPage>;
  }

  parseSitemap(xml: string, url: string): Promise<SitemapResult> {
    return this.run({ id: this.nextId++, kind: 'sitemap', xml, url }) as Promise<SitemapResult>;
  }

  parseFeed(xml: string, url: string): Promise<{ title: string | null; items: FeedItem[] }> {
    return this.run({ id: this.nextId++, kind: 'feed', xml, url }) as Promise<{ title: string | null; items: FeedItem[] }>;
  }

  private run(req: ParseRequest): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error('parser pool closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ req, resolve, reject });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.queue.length) {
      const w = this.workers.find((x) => x.ready && !x.job);
      if (!w) {
        // The ready message of a new process dispatches again.
        if (this.workers.length < this.size) this.spawn();
        return;
      }
      const job = this.queue.shift()!;
      w.job = job;
      w.timer = setTimeout(() => this.fail(w!, new Error(`parse took longer than ${this.timeoutMs} ms`), true), this.timeoutMs);
      w.child.send(job.req);
    }
  }

  private spawn(): void {
    const child = fork(ENTRY, [], {
      execArgv: isTs ? ['--import', 'tsx'] : [],
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const w: Worker = { child, ready: false, job: null, timer: null };
    child.on('message', (res: ParseResponse) => {
      if ('ready' in res) {
        w.ready = true;
        this.dispatch();
        return;
      }
      const job = w.job;
      if (!job || job.req.id !== res.id) return;
      this.settle(w);
      if (res.ok) job.resolve(res.result);
      else job.reject(new Error(res.error));
      this.dispatch();
    });
    child.on('exit', () => {
      const i = this.workers.indexOf(w);
      if (i >= 0) this.workers.splice(i, 1);
      if (w.job) this.fail(w, new Error('parser process ended during the parse'), false);
      this.dispatch();
    });
    child.on('error', () => {});
    this.workers.push(w);
  }

  private settle(w: Worker): void {
    if (w.timer) clearTimeout(w.timer);
    w.timer = null;
    w.job = null;
  }

  private fail(w: Worker, err: Error, kill: boolean): void {
    const job = w.job;
    this.settle(w);
    if (kill) {
      const i = this.workers.indexOf(w);
      if (i >= 0) this.workers.splice(i, 1);
      w.child.kill('SIGKILL');
    }
    job?.reject(err);
    this.dispatch();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new Error('parser pool closed'));
    const exits = this.workers.map((w) => new Promise<void>((r) => (w.child.exitCode !== null ? r() : w.child.once('exit', () => r()))));
    for (const w of this.workers) {
      if (w.job) this.fail(w, new Error('parser pool closed'), false);
      w.child.kill('SIGKILL');
    }
    await Promise.all(exits);
  }
}
