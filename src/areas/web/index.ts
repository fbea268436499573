import { availableParallelism } from 'node:os';
import type { AreaModule } from '../area.js';
import { webChecks } from './doctor.js';
import { PageFetcher } from './fetcher.js';
import { webOperations } from './operations.js';
import { ParserPool } from './parser-pool.js';
import { SearxngProvider } from './search-provider.js';
import { webMigrations } from './repo.js';
import { EXTRACT_JOB, type ExtractJob, WebService } from './service.js';

export const webArea: AreaModule = {
  name: 'web',
  operations: webOperations,
  migrations: webMigrations,
  create(deps) {
    const cfg = deps.config.web;
    const fetcher = new PageFetcher(deps.outbound, cfg.timeoutMs, cfg.maxBytes);
    const search = cfg.searchUrl ? new SearxngProvider(deps.outbound, cfg.searchUrl, cfg.timeoutMs) : undefined;
    const buy = () => cfg.buyUrl ?? `${deps.publicUrl()}/api/v2/account/usage`;
    // Two parser processes at most (started on first use); a parse past 30 s is abandoned.
    const parser = new ParserPool(Math.min(2, availableParallelism()), 30_000);
    const web = new WebService(fetcher, search, deps.usage, buy, deps.store.db, deps.jobs, parser);
    // The lease is renewed while the job runs (up to MAX_EXTRACT_URLS fetches one after another).
    deps.jobs.register<ExtractJob>(EXTRACT_JOB, web.runExtract, { maxAttempts: 2, concurrency: 4, leaseMs: 60_000 });
    return { web };
  },
  doctor: webChecks,
  async close(services) {
    await services.web.close();
  },
};
