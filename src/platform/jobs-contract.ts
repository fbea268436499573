// The job queue's contract (see jobs.ts for the at-least-once rule): what handlers, callers and the
// queue's implementation share, kept apart from the factory so the implementation never imports it.
import type { Kysely } from 'kysely';
import type { Store } from '../store/db.js';
import type { Tables } from '../store/schema.js';
import type { JobStatus } from './jobs-migration.js';

export interface JobInfo<T = unknown> {
  id: string;
  type: string;
  payload: T;
  key: string | null;
  status: JobStatus;
  /** Attempts started so far; inside a handler, the number of the current attempt (1-based). */
  attempts: number;
  maxAttempts: number;
  runAt: Date;
  leaseUntil: Date | null;
  leasedBy: string | null;
  lastError: string | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface JobContext<T = unknown> extends JobInfo<T> {
  /** Aborted when the lease is lost or the queue stops before the handler finished. */
  signal: AbortSignal;
  /**
   * Aborted the moment the queue begins to stop (nube's own shutdown), before the grace ends. Work cut
   * from then on was cut by nube, not failed by the job: a handler that records outcomes of its own
   * (a machine's launch, a document's generation) checks `cutShort(job)` before recording a failure,
   * and rethrows instead; the queue then hands the job back without counting the attempt.
   */
  stopping: AbortSignal;
}

/** The attempt was cut by nube (its shutdown, or the lease lost to another worker), not failed by the job. */
export function cutShort(job: Pick<JobContext, 'signal' | 'stopping'>): boolean {
  return job.stopping.aborted || job.signal.aborted;
}

export type JobHandler<T> = (payload: T, job: JobContext<T>) => Promise<void>;

export interface HandlerOptions {
  /** Attempts before the job is dead (default: the queue's maxAttempts, 5). */
  maxAttempts?: number;
  /** Delay in ms before retrying after failed attempt number `attempt` (default: defaultBackoff). */
  backoff?: (attempt: number) => number;
  /** Lease length; renewed every leaseMs/3 while the handler runs (default 30 s). */
  leaseMs?: number;
  /** Jobs of this type running at once in this queue (default: the queue's concurrency). */
  concurrency?: number;
}

export interface EnqueueOptions {
  /** When the job becomes due (default now). */
  runAt?: Date | number;
  /**
   * Dedupe key: while a job with this key is queued or running, another enqueue with the key does not
   * add a job. With onDuplicate 'keep' (default) it returns the pending job's id and changes nothing;
   * with 'replace' it re-arms a queued job in place (new payload, runAt, attempts reset; same id), or,
   * if the job is already running, detaches the key from it and enqueues a new job. Done and dead jobs
   * do not hold their key.
   */
  key?: string;
  onDuplicate?: 'keep' | 'replace';
  maxAttempts?: number;
  /** Run the insert in the caller's transaction, so the job exists if and only if the caller commits. */
  db?: Kysely<Tables>;
}

export type JobRef = { id: string } | { key: string };

export interface JobQueue {
  register<T>(type: string, handler: JobHandler<T>, opts?: HandlerOptions): void;
  enqueue(type: string, payload: unknown, opts?: EnqueueOptions): Promise<string>;
  /** Deletes queued jobs; a running job keeps running but gets no retry. Returns jobs affected. */
  cancel(ref: JobRef): Promise<number>;
  get(id: string): Promise<JobInfo | undefined>;
  /** Starts polling; an in-process enqueue of a due job wakes the poller at once. */
  start(): void;
  /**
   * Stops leasing, waits up to graceMs (default 10 s) for running handlers, then aborts the rest and
   * releases their leases so another worker (or the next start) runs them without waiting for expiry.
   */
  stop(opts?: { graceMs?: number }): Promise<void>;
  /** One poll cycle that also waits for the handlers it started; returns how many it started. */
  runDue(): Promise<number>;
  /**
   * Polls now. An enqueue inside the caller's transaction (`opts.db`) cannot wake the poller usefully
   * (the row is invisible until commit), so such callers call this after their commit.
   */
  notify(): void;
  readonly workerId: string;
}

type LogFn = (obj: Record<string, unknown>, msg?: string) => void;
export interface JobLogger {
  info: LogFn;
  warn: LogFn;
  error: LogFn;
}

export interface JobQueueOptions {
  store: Pick<Store, 'db' | 'dialect'>;
  logger?: JobLogger;
  /** Poll interval (default 250 ms). */
  pollIntervalMs?: number;
  /** Handlers running at once in this queue, all types together (default 20). */
  concurrency?: number;
  maxAttempts?: number;
  leaseMs?: number;
  /** Keep done jobs this long (default 24 h) and dead ones this long (default 7 days). */
  retainDoneMs?: number;
  retainDeadMs?: number;
  /** How often a queue prunes old jobs (default 10 min). */
  pruneIntervalMs?: number;
  /**
   * How often leases held by a worker whose process is gone from this host are taken back at once
   * (default 5 s; the first poll does it too), rather than waited out (worker-liveness.ts).
   */
  reclaimIntervalMs?: number;
  workerId?: string;
}
