// The job queue's statements. Every write that finishes a lease is guarded by (id, leased_by, attempts,
// status = 'running'): a worker whose lease expired or was released can never overwrite the outcome of
// the worker that took the job over.
import { type ExpressionBuilder, type Insertable, type Kysely, type Selectable, sql } from 'kysely';
import type { Dialect } from '../store/db.js';
import { relaxCommit } from '../store/relaxed-commit.js';
import type { Tables } from '../store/schema.js';
import type { JobInfo } from './jobs-contract.js';
import { type JobStatus, type JobsTable, PENDING_KEY_PREDICATE } from './jobs-migration.js';

export type JobRow = Selectable<JobsTable>;
type Db = Kysely<Tables>;

/** A row as the API shows it (payload parsed; throws on a payload that is not JSON). */
export const toInfo = (r: JobRow): JobInfo => ({
  id: r.id,
  type: r.type,
  payload: JSON.parse(r.payload) as unknown,
  key: r.key,
  status: r.status,
  attempts: r.attempts,
  maxAttempts: r.max_attempts,
  runAt: new Date(r.run_at),
  leaseUntil: r.lease_until === null ? null : new Date(r.lease_until),
  leasedBy: r.leased_by,
  lastError: r.last_error,
  createdAt: new Date(r.created_at),
  updatedAt: new Date(r.updated_at),
});

/** The lease a worker holds on one job: the row as it was claimed. */
export interface Lease {
  id: string;
  attempts: number;
  leased_by: string | null;
}

const ERROR_MAX = 4000;
export const clip = (s: string): string => (s.length > ERROR_MAX ? `${s.slice(0, ERROR_MAX)}…` : s);

function leaseGuard(eb: ExpressionBuilder<Tables, 'jobs'>, lease: Lease) {
  return eb.and([
    eb('id', '=', lease.id),
    eb('leased_by', '=', lease.leased_by),
    eb('attempts', '=', lease.attempts),
    eb('status', '=', 'running'),
  ]);
}

/**
 * Inserts a job; with a key, resolves a clash with the pending (queued or running) job holding it:
 * 'keep' returns that job's id unchanged, 'replace' rewrites a queued one in place (payload, run_at,
 * attempts reset) or, if it is already running, detaches the key from it and inserts a fresh job.
 * Loops because the holder can finish or change state between our statements.
 */
export async function insertJob(
  db: Db,
  row: Insertable<JobsTable>,
  mode: 'keep' | 'replace',
): Promise<string> {
  for (let round = 0; round < 8; round++) {
    const insert = db.insertInto('jobs').values(row);
    const inserted = row.key
      ? await insert
          .onConflict((oc) => oc.column('key').where(PENDING_KEY_PREDICATE).doNothing())
          .returning('id')
          .executeTakeFirst()
      : await insert.returning('id').executeTakeFirst();
    if (inserted) return inserted.id;
    const holder = await db
      .selectFrom('jobs')
      .select(['id', 'status'])
      .where('key', '=', row.key as string)
      .where('status', 'in', ['queued', 'running'])
      .executeTakeFirst();
    if (!holder) continue;
    if (mode === 'keep') return holder.id;
    if (holder.status === 'queued') {
      const res = await db
        .updateTable('jobs')
        .set({
          payload: row.payload,
          run_at: row.run_at,
          max_attempts: row.max_attempts,
          attempts: 0,
          last_error: null,
          updated_at: row.updated_at,
        })
        .where('id', '=', holder.id)
        .where('status', '=', 'queued')
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) === 1) return holder.id;
    } else {
      await db
        .updateTable('jobs')
        .set({ key: null, updated_at: row.updated_at })
        .where('id', '=', holder.id)
        .where('status', '=', 'running')
        .execute();
    }
  }
  throw new Error(`job key ${row.key}: could not settle a concurrent enqueue`);
}

/**
 * Leases up to `limit` due jobs of the given types: queued ones whose run_at has come, and running ones
 * whose lease expired (their worker died) and that have attempts left.
 */
export async function claim(
  db: Db,
  dialect: Dialect,
  p: { types: string[]; limit: number; workerId: string; leaseMs: number; now: number },
): Promise<JobRow[]> {
  const { types, limit, workerId, leaseMs, now } = p;
  const due = (eb: ExpressionBuilder<Tables, 'jobs'>) =>
    eb.and([
      eb('type', 'in', types),
      eb.or([
        eb.and([eb('status', '=', 'queued'), eb('run_at', '<=', now)]),
        eb.and([
          eb('status', '=', 'running'),
          eb('lease_until', '<=', now),
          eb('attempts', '<', eb.ref('max_attempts')),
        ]),
      ]),
    ]);
  const lease = (trx: Db, ids: string[] | null) => {
    const q = trx
      .updateTable('jobs')
      .set((eb) => ({
        status: 'running',
        attempts: eb('attempts', '+', 1),
        leased_by: workerId,
        lease_until: now + leaseMs,
        updated_at: now,
      }))
      .returningAll();
    return ids
      ? q.where('id', 'in', ids)
      : // SQLite: one UPDATE runs under the database's single write lock, so the subquery's pick and
        // the lease are atomic across processes without SELECT ... FOR UPDATE (which SQLite lacks).
        q.where('id', 'in', trx.selectFrom('jobs').select('id').where(due).orderBy('run_at').limit(limit));
  };
  let rows: JobRow[];
  if (dialect === 'postgres') {
    // PostgreSQL: lock the picked rows and skip rows another worker has locked, so concurrent workers
    // each get distinct jobs instead of blocking on, or double-taking, the same ones.
    rows = await db.transaction().execute(async (trx) => {
      // A claim lost with the server is a claim that never happened: the job is simply due again.
      await relaxCommit(trx, dialect);
      const picked = await trx
        .selectFrom('jobs')
        .select('id')
        .where(due)
        .orderBy('run_at')
        .limit(limit)
        .forUpdate()
        .skipLocked()
        .execute();
      return picked.length
        ? lease(
            trx,
            picked.map((r) => r.id),
          ).execute()
        : [];
    });
  } else {
    rows = await lease(db, null).execute();
  }
  return rows.sort((a, b) => a.run_at - b.run_at);
}

/** Jobs whose worker died during their last allowed attempt: no attempt is left, so they are dead. */
export async function reapExhausted(db: Db, now: number): Promise<JobRow[]> {
  return db
    .updateTable('jobs')
    .set({
      status: 'dead',
      last_error: 'lease expired on the last attempt (the worker stopped or crashed)',
      lease_until: null,
      leased_by: null,
      updated_at: now,
    })
    .where('status', '=', 'running')
    .where('lease_until', '<=', now)
    .where((eb) => eb('attempts', '>=', eb.ref('max_attempts')))
    .returningAll()
    .execute();
}

/** Workers holding unexpired leases (the queue judges which of them are gone from this host). */
export async function heldLeases(db: Db, now: number): Promise<{ leased_by: string }[]> {
  const rows = await db
    .selectFrom('jobs')
    .select('leased_by')
    .distinct()
    .where('status', '=', 'running')
    .where('lease_until', '>', now)
    .execute();
  return rows.filter((r): r is { leased_by: string } => r.leased_by !== null);
}

/** Ends the leases of these (dead) workers now, so the jobs are claimed (or reaped) at the next poll. */
export async function expireLeases(db: Db, workers: string[], now: number): Promise<number> {
  const res = await db
    .updateTable('jobs')
    .set({ lease_until: now, updated_at: now })
    .where('status', '=', 'running')
    .where('leased_by', 'in', workers)
    .where('lease_until', '>', now)
    .executeTakeFirst();
  return Number(res.numUpdatedRows);
}

/** Extends a lease; false when it is no longer ours (expired and taken over, or released). */
export async function heartbeat(db: Db, lease: Lease, until: number): Promise<boolean> {
  const res = await db
    .updateTable('jobs')
    .set({ lease_until: until })
    .where((eb) => leaseGuard(eb, lease))
    .executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

export async function complete(db: Db, lease: Lease, now: number): Promise<boolean> {
  const res = await db
    .updateTable('jobs')
    .set({ status: 'done', lease_until: null, updated_at: now })
    .where((eb) => leaseGuard(eb, lease))
    .executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

/**
 * Records a failed attempt: dead when permanent or out of attempts (read from the row, because a
 * cancel during the run lowers max_attempts), else queued again at retryAt.
 */
export async function fail(
  db: Db,
  lease: Lease,
  p: { error: string; permanent: boolean; retryAt: number; now: number },
): Promise<'dead' | 'queued' | 'lost'> {
  const row = await db
    .updateTable('jobs')
    .set((eb) => ({
      status: p.permanent
        ? 'dead'
        : // Literals, not parameters: PostgreSQL would type parameters in a CASE as text, not JobStatus.
          eb
            .case()
            .when('attempts', '>=', eb.ref('max_attempts'))
            .then(sql<JobStatus>`'dead'`)
            .else(sql<JobStatus>`'queued'`)
            .end(),
      run_at: p.retryAt,
      lease_until: null,
      leased_by: null,
      last_error: clip(p.error),
      updated_at: p.now,
    }))
    .where((eb) => leaseGuard(eb, lease))
    .returning('status')
    .executeTakeFirst();
  return row ? (row.status as 'dead' | 'queued') : 'lost';
}

/**
 * Hands leased jobs back at shutdown: queued and due now, and the interrupted attempt is not counted,
 * since the job did not fail.
 */
export async function release(db: Db, leases: Lease[], now: number): Promise<number> {
  let n = 0;
  for (const lease of leases) {
    const res = await db
      .updateTable('jobs')
      .set((eb) => ({
        status: 'queued',
        attempts: eb('attempts', '-', 1),
        lease_until: null,
        leased_by: null,
        updated_at: now,
      }))
      .where((eb) => leaseGuard(eb, lease))
      .executeTakeFirst();
    n += Number(res.numUpdatedRows);
  }
  return n;
}

/**
 * Cancels by id or key: queued jobs are deleted; a running job cannot be interrupted, but it is given
 * no further attempts (its current run finishes as done or dead). Returns the number of jobs affected.
 */
export async function cancel(db: Db, ref: { id: string } | { key: string }, now: number): Promise<number> {
  const match = (eb: ExpressionBuilder<Tables, 'jobs'>) =>
    'id' in ref ? eb('id', '=', ref.id) : eb('key', '=', ref.key);
  const removed = await db.deleteFrom('jobs').where(match).where('status', '=', 'queued').executeTakeFirst();
  const stopped = await db
    .updateTable('jobs')
    .set((eb) => ({ max_attempts: eb.ref('attempts'), updated_at: now }))
    .where(match)
    .where('status', '=', 'running')
    .executeTakeFirst();
  return Number(removed.numDeletedRows) + Number(stopped.numUpdatedRows);
}

/** Deletes finished jobs older than their retention. */
export async function prune(db: Db, p: { doneBefore: number; deadBefore: number }): Promise<number> {
  const res = await db
    .deleteFrom('jobs')
    .where((eb) =>
      eb.or([
        eb.and([eb('status', '=', 'done'), eb('updated_at', '<', p.doneBefore)]),
        eb.and([eb('status', '=', 'dead'), eb('updated_at', '<', p.deadBefore)]),
      ]),
    )
    .executeTakeFirst();
  return Number(res.numDeletedRows);
}
