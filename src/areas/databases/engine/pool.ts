import { DatabaseEngineError, deserializeError } from './errors.js';
import {
  armDeadline,
  type ExecJob,
  type Executor,
  isIdle,
  type Job,
  lowerPriority,
  restorePriority,
  spawnExecutor,
} from './executor-process.js';
import { FairShare } from './fair-share.js';
import { encodeFrame } from './framing.js';
import type { ExecutorOp, ExecutorRequest, ExecutorResponse, ExecutorSettings } from './protocol.js';
import { inSpan } from '../../../platform/tracing.js';

/*
 * Executor pool. Design (docs/decisions.md, "Databases: engine" and "Databases: fair executor pool"):
 * - `size` executor processes at start, growing to `maxSize` while every one is busy, and back
 *   down to `size` once the extra ones have been idle for `idleMs`.
 * - Fair between owners (fair-share.ts): an owner holds at most `perOwner` executors at once, its
 *   requests wait in its own queue (at most `maxQueuedPerOwner`, more are refused with
 *   QueueFull), and a freed executor goes to the owner holding the fewest. One owner's runaway
 *   queries therefore hold `perOwner` executors until their time limit, never the whole pool.
 * - One database's requests run one at a time in arrival order ("lane"): SQLite has one
 *   writer anyway, and it keeps connections of different executors from contending.
 * - A lane's first request goes to an idle executor, preferring one that already has the
 *   database open (warm connection and statement cache). Requests arriving while it runs
 *   are pipelined to that same executor (up to PIPELINE_DEPTH in flight): they would
 *   wait for it anyway, and this way they cost no round trip each. An executor only ever
 *   holds requests of one lane, so a slow query on A never sits in front of one on B.
 * - A request running longer than LONG_REQUEST_MS lowers its executor's CPU priority (10 nice steps)
 *   until it answers: a long query then takes the CPU only when nobody else wants it, and short
 *   queries of other owners do not wait on the CPU behind it.
 * - Killing an executor on timeout (SIGKILL: the only way to stop a native sqlite3_step
 *   here) answers its running request with QueryTimeout; the requests pipelined behind it
 *   never started (the executor writes each answer before it reads the next request) and
 *   are run again on another executor. SQLite rolls back the killed transaction on next
 *   open (WAL recovery).
 */

export interface PoolOptions {
  size: number;
  maxSize: number;
  /**
   * Executors one owner may hold at once (default: size - 1, at least 1, so one owner never holds
   * every resident executor and another owner's request finds one without waiting for a start).
   */
  perOwner?: number;
  /** Requests one owner may have waiting for an executor (default 1000). */
  maxQueuedPerOwner?: number;
  /** Executors beyond `size` idle this long are ended (default 30 s). */
  idleMs?: number;
  /** A request waiting this long for an executor fails with QueueTimeout, having never run (default 60 s). */
  maxWaitMs?: number;
  settings: ExecutorSettings;
}

/** Requests of one lane in flight on one executor at most. */
export const PIPELINE_DEPTH = 64;

interface Lane {
  /** Jobs not yet handed to an executor (or run locally), in arrival order. */
  queue: Job[];
  /** Jobs of this lane runnable, in flight or running locally. */
  active: number;
  /** The executor running this lane's requests, while `active` > 0. */
  ex: Executor | null;
}

export interface PoolStats {
  executors: number;
  busy: number;
  queued: number;
}

export class ExecutorPool {
  private readonly executors: Executor[] = [];
  private readonly lanes = new Map<string, Lane>();
  private readonly fair: FairShare<Job>;
  private readonly idleMs: number;
  private readonly maxWaitMs: number;
  private readonly sweeper: NodeJS.Timeout;
  private nextId = 1;
  private closed = false;

  constructor(private readonly opts: PoolOptions) {
    const perOwner = Math.min(opts.maxSize, Math.max(1, opts.perOwner ?? opts.size - 1));
    this.fair = new FairShare<Job>(perOwner, Math.max(1, opts.maxQueuedPerOwner ?? 1000));
    this.idleMs = opts.idleMs ?? 30_000;
    this.maxWaitMs = opts.maxWaitMs ?? 60_000;
    for (let i = 0; i < opts.size; i++) this.spawn();
    const every = Math.min(5000, Math.max(50, this.idleMs / 2), Math.max(50, this.maxWaitMs / 4));
    this.sweeper = setInterval(() => {
      this.expire();
      this.shrink();
    }, every);
    this.sweeper.unref();
  }

  /**
   * Runs an op on an executor; `lane` serializes it with other requests on that database, `owner`
   * says whose share of executors it uses (default: the lane, else the database).
   */
  run<T>(op: ExecutorOp, timeoutMs: number, lane: string | null, owner?: string): Promise<T> {
    return inSpan(`database executor ${op.op}`, { 'nube.database': op.db }, () => this.dispatch<T>(op, timeoutMs, lane, owner));
  }

  private dispatch<T>(op: ExecutorOp, timeoutMs: number, lane: string | null, owner?: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const who = owner ?? lane ?? op.db;
      this.submit({
        kind: 'exec',
        op,
        lane,
        owner: who,
        timeoutMs,
        waiting: false,
        queuedAt: 0,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
    });
  }

  /** Runs `fn` in this process while holding the database's lane (used by create and delete). */
  exclusive<T>(lane: string, fn: () => Promise<T>, owner?: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.submit({
        kind: 'local',
        fn,
        lane,
        owner: owner ?? lane,
        timeoutMs: 0,
        waiting: false,
        queuedAt: 0,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
    });
  }

  /** Makes every executor close its connection to `db` (before its files are removed). */
  async closeEverywhere(db: string): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const ex of this.executors) {
      if (!ex.dbs.has(db)) continue;
      ex.dbs.delete(db);
      ex.pinned.delete(db);
      const id = this.nextId++;
      waits.push(new Promise<void>((resolve) => ex.controls.set(id, resolve)));
      ex.channel.write(encodeFrame({ id, op: 'close', db } satisfies ExecutorRequest));
    }
    await Promise.all(waits);
  }

  /** Process ids of the executors (tests kill them to check crash handling). */
  get pids(): number[] {
    return this.executors.flatMap((e) => (e.proc.pid === undefined ? [] : [e.proc.pid]));
  }

  get stats(): PoolStats {
    const busy = this.executors.filter((e) => e.inflight.length > 0).length;
    return { executors: this.executors.length, busy, queued: this.fair.queuedCount };
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    this.rejectWaiting();
    await Promise.all(
      this.executors.map(
        (ex) =>
          new Promise<void>((resolve) => {
            if (ex.exited) return resolve();
            ex.proc.once('close', () => resolve());
            ex.proc.kill('SIGKILL');
          }),
      ),
    );
  }

  private submit(job: Job): void {
    if (this.closed) {
      job.reject(new DatabaseEngineError('EngineClosed', 'database engine is closed'));
      return;
    }
    const lane = job.lane === null ? undefined : this.lanes.get(job.lane);
    // The lane is busy: ride along on its executor if nothing is queued ahead.
    const ex = lane?.ex;
    if (lane && job.kind === 'exec' && lane.queue.length === 0 && ex && this.canPipeline(ex, job.lane as string)) {
      lane.active++;
      this.send(ex, job);
      return;
    }
    if (!this.fair.canQueue(job.owner)) {
      job.reject(
        new DatabaseEngineError(
          'QueueFull',
          `${this.fair.maxQueued} database requests of this account are already waiting for an executor; retry when some have answered`,
        ),
      );
      return;
    }
    job.waiting = true;
    job.queuedAt = performance.now();
    this.fair.enqueue(job.owner);
    if (lane) {
      lane.queue.push(job);
      return;
    }
    if (job.lane !== null) this.lanes.set(job.lane, { queue: [], active: 1, ex: null });
    this.makeRunnable(job);
    this.pump();
  }

  private canPipeline(ex: Executor, lane: string): boolean {
    return ex.lane === lane && !ex.exited && ex.killedFor === null && ex.inflight.length < PIPELINE_DEPTH;
  }

  /** The job leaves its owner's queue: it is being sent or started locally. */
  private unqueue(job: Job): void {
    if (!job.waiting) return;
    job.waiting = false;
    this.fair.dequeue(job.owner);
  }

  /** A job at the head of its lane (or lane-less) may start: local ones need no executor. */
  private makeRunnable(job: Job): void {
    if (job.kind === 'exec') {
      this.fair.pushRunnable(job.owner, job);
      return;
    }
    this.unqueue(job);
    // Not called from inside pump's or submit's bookkeeping: fn may submit requests of its own.
    queueMicrotask(() => {
      job
        .fn()
        .then(job.resolve, job.reject)
        .finally(() => {
          this.finish(job);
          this.pump();
        });
    });
  }

  /** A job of a lane is done (answered, failed or handed back): the lane moves on when idle. */
  private finish(job: Job): void {
    if (job.lane === null) return;
    const lane = this.lanes.get(job.lane);
    if (!lane) return;
    lane.active--;
    if (lane.active > 0) return;
    lane.ex = null;
    const next = lane.queue.shift();
    if (next) {
      lane.active = 1;
      this.makeRunnable(next);
    } else {
      this.lanes.delete(job.lane);
    }
  }

  /** Hands runnable jobs to idle executors, fairest owner first; starts a spare when needed. */
  private pump(): void {
    let starved = false;
    outer: while (this.fair.runnableCount > 0) {
      const owners = this.fair.candidates();
      if (owners.length === 0) break;
      // Executors still at a lowered priority (restoring it was not allowed) come last.
      const idle = this.executors.filter(isIdle).sort((a, b) => Number(a.niced) - Number(b.niced));
      if (idle.length === 0) {
        // Every job needs an idle executor (a pinned one too): no need to look at each.
        starved = true;
        break;
      }
      for (const o of owners) {
        for (let i = 0; i < o.runnable.length; i++) {
          const job = o.runnable[i] as ExecJob;
          const db = job.op.db;
          const pin = job.op.op === 'export' ? undefined : this.executors.find((e) => e.pinned.has(db));
          const ex = pin
            ? isIdle(pin)
              ? pin
              : undefined
            : (idle.find((e) => e.dbs.has(db) && !e.niced) ?? idle[0]);
          if (!ex) {
            if (!pin) starved = true;
            continue;
          }
          this.fair.takeRunnable(o, i);
          this.start(ex, job);
          continue outer;
        }
      }
      break;
    }
    // Keep a spare: when no executor is idle any more, start one now rather than when the
    // next request arrives (a process takes tens of ms to start, more under tsx). Nobody waits for
    // a spare, so it starts at a lower CPU priority than the queries running meanwhile.
    const idle = this.executors.some((e) => e.inflight.length === 0 && !e.exited);
    if (
      (starved || !idle) &&
      !this.executors.some((e) => !e.ready) &&
      this.executors.length < this.opts.maxSize
    ) {
      this.spawn(!starved);
    }
  }

  /** Hands a job to an idle executor, then pipelines whatever its lane has queued behind it. */
  private start(ex: Executor, job: ExecJob): void {
    ex.lane = job.lane;
    ex.owner = job.owner;
    this.fair.acquire(job.owner);
    this.send(ex, job);
    if (job.lane === null) return;
    const lane = this.lanes.get(job.lane);
    if (!lane) return;
    lane.ex = ex;
    while (lane.queue[0]?.kind === 'exec' && this.canPipeline(ex, job.lane)) {
      lane.active++;
      this.send(ex, lane.queue.shift() as ExecJob);
    }
  }

  private send(ex: Executor, job: ExecJob): void {
    this.unqueue(job);
    const id = this.nextId++;
    ex.inflight.push({ id, job });
    if (ex.inflight.length === 1) armDeadline(ex);
    if (job.op.op !== 'export') ex.dbs.add(job.op.db);
    ex.channel.write(encodeFrame({ ...job.op, id } satisfies ExecutorRequest));
  }

  /** The executor has nothing in flight any more: it no longer counts against its owner's share. */
  private release(ex: Executor): void {
    ex.idleSince = performance.now();
    restorePriority(ex);
    if (ex.owner === null) return;
    this.fair.release(ex.owner);
    ex.owner = null;
  }

  private spawn(spare = false): void {
    const ex = spawnExecutor(
      this.opts.settings,
      (e, msg) => this.onMessage(e, msg),
      (e, code, signal) => this.onExit(e, code, signal),
    );
    if (spare) lowerPriority(ex);
    this.executors.push(ex);
  }

  /**
   * Ends executors beyond `size` that have been idle for `idleMs`, longest idle first (those
   * without temp objects before those with: ending a connection drops its temp objects, as
   * evicting it would). Closing the channel makes the executor exit at end of file.
   */
  private shrink(): void {
    const extra = this.executors.length - this.opts.size;
    if (extra <= 0 || this.closed) return;
    const now = performance.now();
    const idle = this.executors
      .filter((e) => isIdle(e) && now - e.idleSince >= this.idleMs)
      .sort(
        (a, b) => Number(b.niced) - Number(a.niced) || a.pinned.size - b.pinned.size || a.idleSince - b.idleSince,
      )
      .slice(0, extra);
    for (const ex of idle) {
      this.executors.splice(this.executors.indexOf(ex), 1);
      ex.channel.end();
    }
  }

  /**
   * Requests that have waited `maxWaitMs` for an executor while their owner's share is in use fail
   * with QueueTimeout: they never ran,
   * and a client that sent a backlog of runaways gets its answers (and its queue back) in bounded
   * time instead of hours later. Oldest first within a lane, so the lane stays in order.
   */
  private expire(): void {
    if (this.fair.queuedCount === 0 || this.closed) return;
    const now = performance.now();
    // Only while the owner's own requests hold its share: waiting for a process to start, or for
    // other owners' requests when the pool is at its maximum, is not this owner's backlog.
    const old = (j: Job | undefined) =>
      j?.waiting === true && now - j.queuedAt >= this.maxWaitMs && this.fair.atShare(j.owner);
    const behind: Job[] = [];
    for (const lane of this.lanes.values()) while (old(lane.queue[0])) behind.push(lane.queue.shift() as Job);
    const heads: Job[] = [];
    for (const o of this.fair.slots()) {
      for (let i = o.runnable.length - 1; i >= 0; i--) if (old(o.runnable[i])) heads.push(this.fair.takeRunnable(o, i));
    }
    for (const job of [...behind, ...heads]) {
      this.unqueue(job);
      job.reject(
        new DatabaseEngineError(
          'QueueTimeout',
          `waited ${Math.round(now - job.queuedAt)} ms for a database executor and never ran (this account's earlier requests held its share of executors); retry later`,
        ),
      );
    }
    // A lane's runnable head gave up: the lane moves on (what is left in its queue is younger).
    for (const job of heads) this.finish(job);
    if (heads.length > 0) this.pump();
  }

  private onMessage(ex: Executor, msg: ExecutorResponse): void {
    if ('ready' in msg) {
      ex.ready = true;
      ex.idleSince = performance.now();
      restorePriority(ex);
      this.pump();
      return;
    }
    if ('evicted' in msg) {
      ex.dbs.delete(msg.evicted);
      ex.pinned.delete(msg.evicted);
      return;
    }
    const control = ex.controls.get(msg.id);
    if (control) {
      ex.controls.delete(msg.id);
      control();
      return;
    }
    const cur = ex.inflight[0];
    if (!cur || cur.id !== msg.id) return;
    ex.inflight.shift();
    armDeadline(ex);
    if (ex.inflight.length === 0) this.release(ex);
    const job = cur.job;
    if (msg.ok && msg.pinned && job.op.op !== 'export') ex.pinned.add(job.op.db);
    if (msg.ok) job.resolve(msg.result);
    else job.reject(deserializeError(msg.error));
    this.finish(job);
    if (this.fair.runnableCount > 0 || ex.inflight.length === 0) this.pump();
  }

  private onExit(ex: Executor, code: number | null, signal: NodeJS.Signals | null): void {
    ex.exited = true;
    if (ex.timer) clearTimeout(ex.timer);
    ex.timer = null;
    const i = this.executors.indexOf(ex);
    if (i >= 0) this.executors.splice(i, 1);
    for (const done of ex.controls.values()) done();
    ex.controls.clear();
    const [cur, ...notStarted] = ex.inflight.splice(0);
    this.release(ex);
    if (cur) {
      // Requests pipelined behind the one that was running never started: back to the
      // front of their lane (and their owner's queue), to run on another executor once the
      // lane moves on.
      const lane = cur.job.lane === null ? undefined : this.lanes.get(cur.job.lane);
      if (lane && notStarted.length > 0) {
        lane.active -= notStarted.length;
        for (const n of notStarted) {
          n.job.waiting = true;
          n.job.queuedAt = performance.now();
          this.fair.enqueue(n.job.owner);
        }
        lane.queue.unshift(...notStarted.map((n) => n.job));
      }
      cur.job.reject(
        ex.killedFor === cur.id
          ? new DatabaseEngineError(
              'QueryTimeout',
              `query stopped after the ${cur.job.timeoutMs} ms time limit; nothing it wrote was kept`,
            )
          : new DatabaseEngineError(
              'EngineWorkerCrashed',
              ex.killedFor === null
                ? `database executor exited (${signal ?? code})`
                : 'database executor was stopped for the time limit of the request before this one, which ended just then; this one may not have run',
            ),
      );
      this.finish(cur.job);
    }
    if (this.closed) {
      this.rejectWaiting();
      return;
    }
    if (this.executors.length < this.opts.size) this.spawn();
    this.pump();
  }

  private rejectWaiting(): void {
    const err = new DatabaseEngineError('EngineClosed', 'database engine is closed');
    const waiting = [...this.fair.drain(), ...[...this.lanes.values()].flatMap((l) => l.queue.splice(0))];
    for (const job of waiting) {
      this.unqueue(job);
      job.reject(err);
    }
  }
}
