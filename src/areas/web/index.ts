import { availableParallelism } from 'node:os';
import { ChromiumBrowser } from '../../browser/index.js';
import type { AreaModule } from '../area.js';
import { webChecks } from './doctor.js';
import { PageFetcher } from './fetcher.js';
import { webOperations } from './operations.js';
import { ParserPool } from './parser-pool.js';
import { PageRenderer } from './renderer.js';
import { SearxngProvider } from './search-provider.js';
import { webMigrations } from './repo.js';
import { EXTRACT_JOB, type ExtractJob, WebService } from './service.js';

export const webArea: AreaModule = {
  name: 'web',
  operations: webOperations,
  migrations: webMigrations,
  create(deps, other) {
    const cfg = deps.config.web;
    const fetcher = new PageFetcher(deps.outbound, cfg.timeoutMs, cfg.maxBytes);
    const search = cfg.searchUrl ? new SearxngProvider(deps.outbound, cfg.searchUrl, cfg.timeoutMs) : undefined;
    const buy = () => cfg.buyUrl ?? `${deps.publicUrl()}/api/v2/account/usage`;
    // Two parser processes at most (started on first use); a parse past 30 s is abandoned.
    const parser = new ParserPool(Math.min(2, availableParallelism()), 30_000);
    // `render: true` reads pages in a Chromium of its own (launched by the first such page), apart from the
    // PDF export's: a page's scripts never share a browser with documents being printed.
    const browser = new ChromiumBrowser({ executablePath: deps.config.pdf.chromiumPath, pages: 2, maxMemoryBytes: deps.config.pdf.maxMemoryBytes, log: deps.log });
    const renderer = new PageRenderer(browser, deps.outbound, cfg.timeoutMs, cfg.maxBytes * 4);
    // Datasets are built after this area: looked up when a job or crawl names one.
    const web = new WebService(fetcher, search, deps.usage, buy, deps.store.db, deps.jobs, parser, () => other.datasets, () => other.llm, renderer);
    // The lease is renewed while the job runs (up to MAX_EXTRACT_INPUTS units read one after another).
    deps.jobs.register<ExtractJob>(EXTRACT_JOB, web.runExtract, { maxAttempts: 2, concurrency: 4, leaseMs: 60_000 });
    return { web };
  },
  doctor: webChecks,
  async close(services) {
    await services.web.close();
  },
};
