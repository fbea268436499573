import { type Kysely, type Migration, sql } from 'kysely';

export type JobStatus = 'queued' | 'running' | 'done' | 'dead';

/** Row of the durable job queue. Times are epoch milliseconds (bigint; pg int8 is parsed to number). */
export interface JobsTable {
  id: string;
  type: string;
  /** JSON text of the handler's payload. */
  payload: string;
  /** Dedupe key: at most one queued-or-running job holds a given key (partial unique index). */
  key: string | null;
  status: JobStatus;
  /** Attempts started so far (incremented when a worker leases the job). */
  attempts: number;
  max_attempts: number;
  run_at: number;
  lease_until: number | null;
  /** The worker holding the lease; kept on a done job as the record of which worker ran it. */
  leased_by: string | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
}

declare module '../store/schema.js' {
  interface Tables {
    jobs: JobsTable;
  }
}

/**
 * The predicate of the partial unique index on `key`. Upserts must name the very same text as their
 * conflict target's WHERE: both SQLite and PostgreSQL only infer a partial index whose predicate they
 * can prove from the statement, and bound parameters would defeat that proof.
 */
export const PENDING_KEY_PREDICATE = sql<boolean>`"key" is not null and "status" in ('queued', 'running')`;

export const jobsMigrations: Record<string, Migration> = {
  '0002-platform-jobs': {
    // biome-ignore lint/suspicious/noExplicitAny: migrations run before (and regardless of) the typed schema
    async up(db: Kysely<any>): Promise<void> {
      await db.schema
        .createTable('jobs')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('payload', 'text', (c) => c.notNull())
        .addColumn('key', 'text')
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('max_attempts', 'integer', (c) => c.notNull())
        .addColumn('run_at', 'bigint', (c) => c.notNull())
        .addColumn('lease_until', 'bigint')
        .addColumn('leased_by', 'text')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      // Claiming scans due queued jobs by run_at, and expired leases by lease_until.
      await db.schema.createIndex('jobs_status_run_at').on('jobs').columns(['status', 'run_at']).execute();
      await db.schema
        .createIndex('jobs_status_lease')
        .on('jobs')
        .columns(['status', 'lease_until'])
        .execute();
      // Pruning deletes finished jobs by age.
      await db.schema
        .createIndex('jobs_status_updated')
        .on('jobs')
        .columns(['status', 'updated_at'])
        .execute();
      await db.schema
        .createIndex('jobs_key_pending')
        .unique()
        .on('jobs')
        .column('key')
        .where(PENDING_KEY_PREDICATE)
        .execute();
    },
    // biome-ignore lint/suspicious/noExplicitAny: see up()
    async down(db: Kysely<any>): Promise<void> {
      await db.schema.dropTable('jobs').execute();
    },
  },
};
