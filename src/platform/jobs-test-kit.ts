// Shared set-up for the job queue tests: one migrated metadata store per dialect (SQLite in a temp
// dir, a fresh PostgreSQL database per test file), plus bookkeeping so every queue and store a test
// opens is stopped and closed after it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type Dialect, openStore, type Store, type StoreOptions } from '../store/db.js';
import { migrateToLatest } from '../store/migrate.js';
import { createJobQueue, type JobQueue, type JobQueueOptions, jobsMigrations } from './jobs.js';
import { randomToken } from './ids.js';

// The suite's PostgreSQL (test/services.ts: the configured one, or a throwaway one it started).
const PG_ADMIN = process.env.NUBE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** True when PostgreSQL answers; under CI its absence is an error, never a skip. */
export async function postgresAvailable(): Promise<boolean> {
  const c = new pg.Client({ connectionString: PG_ADMIN, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    await c.end();
    return true;
  } catch (err) {
    if (process.env.CI) throw new Error(`PostgreSQL at ${PG_ADMIN} is not answering: ${String(err)}`);
    return false;
  }
}

async function admin(statement: string): Promise<void> {
  const c = new pg.Client({ connectionString: PG_ADMIN });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

export class JobsKit {
  readonly location: StoreOptions;
  private readonly stores: Store[] = [];
  private readonly queues: JobQueue[] = [];
  private readonly pgDb?: string;

  constructor(readonly dialect: Dialect) {
    const dataDir = mkdtempSync(join(tmpdir(), 'nube-jobs-'));
    if (dialect === 'postgres') {
      this.pgDb = `nube_test_jobs_${randomToken(10)}`;
      this.location = { dataDir, databaseUrl: PG_ADMIN.replace(/\/[^/]*$/, `/${this.pgDb}`) };
    } else {
      this.location = { dataDir };
    }
  }

  async setup(): Promise<void> {
    if (this.pgDb) await admin(`CREATE DATABASE ${this.pgDb}`);
    await migrateToLatest(this.store().db, jobsMigrations);
  }

  /** A new store handle (its own pool or connection) on the same database. */
  store(): Store {
    const s = openStore(this.location);
    this.stores.push(s);
    return s;
  }

  queue(opts: Partial<JobQueueOptions> = {}): JobQueue {
    const q = createJobQueue({ store: this.stores[0] ?? this.store(), pollIntervalMs: 20, ...opts });
    this.queues.push(q);
    return q;
  }

  /** Stops every queue a test made (releasing leases) so the next test starts clean. */
  async stopQueues(): Promise<void> {
    await Promise.all(this.queues.splice(0).map((q) => q.stop({ graceMs: 0 })));
  }

  async teardown(): Promise<void> {
    await this.stopQueues();
    await Promise.all(this.stores.splice(0).map((s) => s.close()));
    if (this.pgDb) await admin(`DROP DATABASE IF EXISTS ${this.pgDb} WITH (FORCE)`);
    rmSync(this.location.dataDir, { recursive: true, force: true });
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls until `cond` holds; the default limit is generous (a busy machine), the wait ends at once when it holds. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(10);
  }
}

/** A job type no other test uses: tests share one table, and a queue only claims its own types. */
export const uniqueType = (name: string) => `${name}.${randomToken(6)}`;
