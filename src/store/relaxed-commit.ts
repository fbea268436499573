import { type Kysely, sql } from 'kysely';
import type { Dialect } from './db.js';

/**
 * Bookkeeping that may be redone (an outbox drain, a job claim, a webhook attempt record) commits
 * without waiting for PostgreSQL's WAL flush: about 1.5 ms instead of 6.5 ms per commit on this host's
 * disk, and each delivery passes through several. Only a crash of the PostgreSQL server (not of nube)
 * can lose such a commit, and then it is lost with every later one (the WAL is sequential): the outbox
 * rows come back and are drained again, the job runs again, the attempt is made again; all idempotent,
 * delivery being at least once. The change an API call acknowledges never uses this. SQLite already runs
 * with synchronous=NORMAL (store/db.ts), so there is nothing to do there.
 */
// biome-ignore lint/suspicious/noExplicitAny: any transaction, whatever its tables
export async function relaxCommit(trx: Kysely<any>, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') await sql`SET LOCAL synchronous_commit = off`.execute(trx);
}
