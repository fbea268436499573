// The polling worker behind JobQueue (see jobs.ts for the contract and the at-least-once rule).
import { runPinned } from './nodes.js';
import { setTimeout as delay } from 'node:timers/promises';
import type { Kysely } from 'kysely';
import type { Tables } from '../store/schema.js';
import { newId } from './ids.js';
import type {
  EnqueueOptions,
  HandlerOptions,
  JobHandler,
  JobInfo,
  JobLogger,
  JobQueue,
  JobQueueOptions,
  JobRef,
} from './jobs-contract.js';
import { defaultBackoff, PermanentJobError } from './jobs-retry.js';
import * as q from './jobs-sql.js';
import { goneHere, taggedWorkerId } from './worker-liveness.js';
import { inSpan } from './tracing.js';

const silent: JobLogger = { info: () => {}, warn: () => {}, error: () => {} };

interface Registered {
  handler: JobHandler<unknown>;
  maxAttempts: number;
  backoff: (attempt: number) => number;
  leaseMs: number;
  concurrency: number;
}

interface Running {
  lease: q.Lease;
  type: string;
  abort: AbortController;
  beat: NodeJS.Timeout;
  done: Promise<void>;
}

export class SqlJobQueue implements JobQueue {
  readonly workerId: string;
  private readonly db: Kysely<Tables>;
  private readonly log: JobLogger;
  private readonly handlers = new Map<string, Registered>();
  private readonly running = new Map<string, Running>();
  private accepting = false;
  private loop: Promise<void> | undefined;
  private wakeUp: (() => void) | undefined;
  private wakePending = false;
  private lastPrune = 0;
  private lastReclaim = 0;
  /** Aborted when stop() begins: handlers see it as `job.stopping` (a new one at each start). */
  private stopping = new AbortController();

  constructor(private readonly opts: JobQueueOptions) {
    this.db = opts.store.db;
    this.log = opts.logger ?? silent;
    // The process's tag lets a restarted nube on this host take back this worker's leases at once.
    this.workerId = taggedWorkerId(opts.workerId ?? newId('wrk'));
  }

  register<T>(type: string, handler: JobHandler<T>, o: HandlerOptions = {}): void {
    if (this.handlers.has(type)) throw new Error(`job type ${type} is already registered`);
    this.handlers.set(type, {
      handler: handler as JobHandler<unknown>,
      maxAttempts: o.maxAttempts ?? this.opts.maxAttempts ?? 5,
      backoff: o.backoff ?? defaultBackoff,
      leaseMs: o.leaseMs ?? this.opts.leaseMs ?? 30_000,
      concurrency: o.concurrency ?? this.opts.concurrency ?? 20,
    });
  }

  async enqueue(type: string, payload: unknown, o: EnqueueOptions = {}): Promise<string> {
    const now = Date.now();
    const runAt = o.runAt === undefined ? now : typeof o.runAt === 'number' ? o.runAt : o.runAt.getTime();
    const maxAttempts = o.maxAttempts ?? this.handlers.get(type)?.maxAttempts ?? this.opts.maxAttempts ?? 5;
    const row = {
      id: newId('job', now),
      type,
      payload: JSON.stringify(payload ?? null),
      key: o.key ?? null,
      status: 'queued' as const,
      attempts: 0,
      max_attempts: maxAttempts,
      run_at: runAt,
      lease_until: null,
      leased_by: null,
      last_error: null,
      created_at: now,
      updated_at: now,
    };
    const id = await q.insertJob(o.db ?? this.db, row, o.onDuplicate ?? 'keep');
    // Inside a caller's transaction the row is not visible yet: the caller notifies after its commit.
    if (runAt <= Date.now() && !o.db) this.wake();
    return id;
  }

  async cancel(ref: JobRef): Promise<number> {
    return q.cancel(this.db, ref, Date.now());
  }

  async get(id: string): Promise<JobInfo | undefined> {
    const row = await this.db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirst();
    return row ? q.toInfo(row) : undefined;
  }

  start(): void {
    if (this.loop) return;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    this.accepting = true;
    this.loop = this.pollLoop();
  }

  async stop(o: { graceMs?: number } = {}): Promise<void> {
    this.accepting = false;
    this.stopping.abort(new Error('job queue stopping'));
    this.wake();
    await this.loop;
    this.loop = undefined;
    if (this.running.size) {
      const grace = new AbortController();
      const finished = Promise.allSettled([...this.running.values()].map((r) => r.done));
      await Promise.race([
        finished,
        delay(o.graceMs ?? 10_000, undefined, { signal: grace.signal }).catch(() => {}),
      ]);
      grace.abort();
    }
    const left = [...this.running.values()];
    if (!left.length) return;
    for (const r of left) clearInterval(r.beat);
    // Release before aborting: an aborted handler rejects at once, and its failure must find the lease
    // already gone (a no-op) rather than count as a failed attempt with a backoff.
    const leases = left.map((r) => r.lease);
    const n = await q.release(this.db, leases, Date.now());
    for (const r of left) r.abort.abort(new Error('job queue stopping'));
    this.log.warn(
      { worker: this.workerId, released: n },
      'job queue stopped with handlers running; leases released',
    );
  }

  async runDue(): Promise<number> {
    const started = await this.poll(true);
    await Promise.allSettled(started);
    return started.length;
  }

  notify(): void {
    this.wake();
  }

  private wake(): void {
    if (this.wakeUp) this.wakeUp();
    else this.wakePending = true;
  }

  private async pollLoop(): Promise<void> {
    const interval = this.opts.pollIntervalMs ?? 250;
    while (this.accepting) {
      try {
        await this.maybePrune();
        await this.poll(false);
      } catch (err) {
        this.log.warn({ err, worker: this.workerId }, 'job poll failed; retrying on the next tick');
      }
      if (!this.accepting) break;
      if (this.wakePending) {
        this.wakePending = false;
        continue;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, interval);
        this.wakeUp = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wakeUp = undefined;
      this.wakePending = false;
    }
  }

  private async maybePrune(): Promise<void> {
    const now = Date.now();
    if (now - this.lastPrune < (this.opts.pruneIntervalMs ?? 600_000)) return;
    this.lastPrune = now;
    const n = await q.prune(this.db, {
      doneBefore: now - (this.opts.retainDoneMs ?? 86_400_000),
      deadBefore: now - (this.opts.retainDeadMs ?? 7 * 86_400_000),
    });
    if (n) this.log.info({ pruned: n }, 'pruned finished jobs');
  }

  /**
   * Leases held by a worker whose process is certainly gone from this host (a kill -9, a crash) end now
   * instead of at their expiry: the job is due at once, its interrupted attempt counted as a crash's is.
   */
  private async maybeReclaim(): Promise<void> {
    const now = Date.now();
    if (now - this.lastReclaim < (this.opts.reclaimIntervalMs ?? 5000)) return;
    this.lastReclaim = now;
    const held = await q.heldLeases(this.db, now);
    const gone = goneHere([...new Set(held.map((h) => h.leased_by))].filter((w) => w !== this.workerId));
    if (!gone.size) return;
    const n = await q.expireLeases(this.db, [...gone], Date.now());
    if (n) this.log.warn({ worker: this.workerId, jobs: n, from: [...gone] }, 'took back the leases of a worker that is gone from this host');
  }

  /**
   * Leases as many due jobs as there are free slots and starts them. Types sharing a lease length are
   * claimed together; each round's limit is the smallest free slot count among them, so no type can
   * exceed its concurrency, and a full round means more may be due, so it claims again.
   */
  private async poll(manual: boolean): Promise<Promise<void>[]> {
    const started: Promise<void>[] = [];
    await this.maybeReclaim();
    const now = Date.now();
    for (const dead of await q.reapExhausted(this.db, now)) {
      this.log.error({ job: dead.id, type: dead.type, attempts: dead.attempts }, 'job dead: lease expired');
    }
    const total = this.opts.concurrency ?? 20;
    for (;;) {
      if (!manual && !this.accepting) break;
      const byLease = new Map<number, { types: string[]; free: number }>();
      for (const [type, h] of this.handlers) {
        const free = h.concurrency - this.countRunning(type);
        if (free <= 0) continue;
        const g = byLease.get(h.leaseMs) ?? { types: [], free: Number.POSITIVE_INFINITY };
        g.types.push(type);
        g.free = Math.min(g.free, free);
        byLease.set(h.leaseMs, g);
      }
      let full = false;
      for (const [leaseMs, g] of byLease) {
        const limit = Math.min(g.free, total - this.running.size);
        if (limit <= 0) break;
        const rows = await q.claim(this.db, this.opts.store.dialect, {
          ...g,
          limit,
          workerId: this.workerId,
          leaseMs,
          now: Date.now(),
        });
        for (const row of rows) started.push(this.execute(row));
        if (rows.length === limit) full = true;
      }
      if (!full) break;
    }
    return started;
  }

  private countRunning(type: string): number {
    let n = 0;
    for (const r of this.running.values()) if (r.type === type) n++;
    return n;
  }

  private execute(row: q.JobRow): Promise<void> {
    const h = this.handlers.get(row.type)!;
    const lease: q.Lease = { id: row.id, attempts: row.attempts, leased_by: row.leased_by };
    const abort = new AbortController();
    const beat = setInterval(
      () => {
        q.heartbeat(this.db, lease, Date.now() + h.leaseMs).then(
          (ours) => {
            if (!ours) abort.abort(new Error('job lease lost'));
          },
          (err) => this.log.warn({ err, job: row.id }, 'job lease renewal failed'),
        );
      },
      Math.max(10, Math.floor(h.leaseMs / 3)),
    );
    beat.unref();
    const entry = { lease, type: row.type, abort, beat } as Running;
    this.running.set(row.id, entry);
    entry.done = this.attempt(row, h, lease, abort.signal).finally(() => {
      clearInterval(beat);
      // A slot freed while every slot was taken: due jobs may be waiting, so poll now, not next tick.
      const saturated =
        this.running.size >= (this.opts.concurrency ?? 20) || this.countRunning(row.type) >= h.concurrency;
      this.running.delete(row.id);
      if (saturated && this.accepting) this.wake();
    });
    return entry.done;
  }

  private async attempt(row: q.JobRow, h: Registered, lease: q.Lease, signal: AbortSignal): Promise<void> {
    const log = { job: row.id, type: row.type, attempt: row.attempts };
    const stopping = this.stopping.signal;
    let failure: { err: unknown } | undefined;
    try {
      let info: JobInfo;
      try {
        info = q.toInfo(row);
      } catch (err) {
        throw new PermanentJobError('job payload is not valid JSON', { cause: err });
      }
      // Background work runs on the node that leased it: placement keeps what it creates here.
      await inSpan(`job ${row.type}`, { 'nube.job.type': row.type, 'nube.job.attempt': row.attempts }, () =>
        runPinned(() => h.handler(info.payload, { ...info, signal, stopping })),
      );
    } catch (err) {
      failure = { err };
    }
    try {
      const now = Date.now();
      if (!failure) {
        if (!(await q.complete(this.db, lease, now))) {
          this.log.warn(log, 'job finished after its lease was lost; its outcome was not recorded');
        }
        return;
      }
      const { err } = failure;
      if (stopping.aborted) {
        // Cut by nube's own stop (an exec ended with the helper, a connection closed): handed back as
        // if nube had crashed, never recorded as the job's failure; the attempt is not counted.
        const n = await q.release(this.db, [lease], now);
        this.log.warn({ ...log, err, released: n }, 'job cut by the stop of nube; it runs again');
        return;
      }
      const status = await q.fail(this.db, lease, {
        error: err instanceof Error ? err.stack || err.message : String(err),
        permanent: err instanceof PermanentJobError,
        retryAt: now + Math.max(0, h.backoff(row.attempts)),
        now,
      });
      if (status === 'dead') this.log.error({ ...log, err }, 'job dead');
      else if (status === 'queued') this.log.warn({ ...log, err }, 'job failed; will retry');
      else this.log.warn({ ...log, err }, 'job failed after its lease was lost');
    } catch (dbErr) {
      // The lease will expire and the job run again: at-least-once holds even if the store is away.
      this.log.error({ ...log, err: dbErr }, 'could not record the job outcome');
    }
  }
}
