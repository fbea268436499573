import { type ChildProcess, spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { DatabaseEngineError, deserializeError } from './errors.js';
import { encodeFrame, FrameReader } from './framing.js';
import type { ExecutorOp, ExecutorRequest, ExecutorResponse, ExecutorSettings } from './protocol.js';

/*
 * Executor pool. Design (docs/decisions.md, "Databases: engine"):
 * - `size` executor processes at start, growing to `maxSize` while every one is busy,
 *   so a slow query on one database never makes a query on another wait for it.
 * - One database's requests run one at a time in arrival order ("lane"): SQLite has one
 *   writer anyway, and it keeps connections of different executors from contending.
 * - A lane's first request goes to an idle executor, preferring one that already has the
 *   database open (warm connection and statement cache). Requests arriving while it runs
 *   are pipelined to that same executor (up to PIPELINE_DEPTH in flight): they would
 *   wait for it anyway, and this way they cost no round trip each. An executor only ever
 *   holds requests of one lane, so a slow query on A never sits in front of one on B.
 * - Killing an executor on timeout (SIGKILL: the only way to stop a native sqlite3_step
 *   here) answers its running request with QueryTimeout; the requests pipelined behind it
 *   never started (the executor writes each answer before it reads the next request) and
 *   are run again on another executor. SQLite rolls back the killed transaction on next
 *   open (WAL recovery).
 */

export interface PoolOptions {
  size: number;
  maxSize: number;
  settings: ExecutorSettings;
}

/** Requests of one lane in flight on one executor at most. */
export const PIPELINE_DEPTH = 64;

type Settle = { resolve: (v: unknown) => void; reject: (e: Error) => void };
type Job = Settle & { lane: string | null; timeoutMs: number } & (
    | { kind: 'exec'; op: ExecutorOp }
    | { kind: 'local'; fn: () => Promise<unknown> }
  );
type ExecJob = Job & { kind: 'exec' };

interface Lane {
  /** Jobs not yet handed to an executor (or run locally), in arrival order. */
  queue: Job[];
  /** Jobs of this lane runnable, in flight or running locally. */
  active: number;
  /** The executor running this lane's requests, while `active` > 0. */
  ex: Executor | null;
}

interface Executor {
  proc: ChildProcess;
  channel: Socket;
  ready: boolean;
  /** Requests sent and not answered, in order; the first one is running. */
  inflight: { id: number; job: ExecJob }[];
  /** The lane of the in-flight requests (null for lane-less ones, never pipelined). */
  lane: string | null;
  /** When the running request overruns its limit (performance.now() ms). */
  deadline: number;
  timer: NodeJS.Timeout | null;
  timerAt: number;
  /** Id of the request whose time limit killed this executor. */
  killedFor: number | null;
  exited: boolean;
  controls: Map<number, () => void>;
  dbs: Set<string>;
  /** Databases whose connection here holds temp objects: they may run nowhere else. */
  pinned: Set<string>;
}

const isTs = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(`./executor-main.${isTs ? 'ts' : 'js'}`, import.meta.url));

export class ExecutorPool {
  private readonly executors: Executor[] = [];
  private readonly lanes = new Map<string, Lane>();
  private readonly runnable: Job[] = [];
  private nextId = 1;
  private closed = false;

  constructor(private readonly opts: PoolOptions) {
    for (let i = 0; i < opts.size; i++) this.spawn();
  }

  /** Runs an op on an executor; `lane` serializes it with other requests on that database. */
  run<T>(op: ExecutorOp, timeoutMs: number, lane: string | null): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.submit({ kind: 'exec', op, lane, timeoutMs, resolve: resolve as (v: unknown) => void, reject });
    });
  }

  /** Runs `fn` in this process while holding the database's lane (used by delete). */
  exclusive<T>(lane: string, fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.submit({
        kind: 'local',
        fn,
        lane,
        timeoutMs: 0,
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

  get stats(): { executors: number; busy: number; queued: number } {
    const busy = this.executors.filter((e) => e.inflight.length > 0).length;
    return { executors: this.executors.length, busy, queued: this.runnable.length };
  }

  async close(): Promise<void> {
    this.closed = true;
    const err = new DatabaseEngineError('EngineClosed', 'database engine is closed');
    for (const job of this.runnable.splice(0)) job.reject(err);
    for (const lane of this.lanes.values()) for (const job of lane.queue.splice(0)) job.reject(err);
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
    if (job.lane !== null) {
      const lane = this.lanes.get(job.lane);
      if (lane) {
        // The lane is busy: ride along on its executor if nothing is queued ahead.
        const ex = lane.ex;
        if (job.kind === 'exec' && lane.queue.length === 0 && ex && this.canPipeline(ex, job.lane)) {
          lane.active++;
          this.send(ex, job);
        } else {
          lane.queue.push(job);
        }
        return;
      }
      this.lanes.set(job.lane, { queue: [], active: 1, ex: null });
    }
    this.runnable.push(job);
    this.pump();
  }

  private canPipeline(ex: Executor, lane: string): boolean {
    return ex.lane === lane && !ex.exited && ex.killedFor === null && ex.inflight.length < PIPELINE_DEPTH;
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
      this.runnable.push(next);
    } else {
      this.lanes.delete(job.lane);
    }
  }

  private pump(): void {
    // Local jobs need no executor: never leave them behind a job waiting for one.
    for (let i = this.runnable.length - 1; i >= 0; i--) {
      const job = this.runnable[i];
      if (job.kind !== 'local') continue;
      this.runnable.splice(i, 1);
      job
        .fn()
        .then(job.resolve, job.reject)
        .finally(() => {
          this.finish(job);
          this.pump();
        });
    }
    let waiting = false;
    for (let i = 0; i < this.runnable.length; ) {
      const job = this.runnable[i] as ExecJob;
      const db = job.op.db;
      const pin = job.op.op === 'export' ? undefined : this.executors.find((e) => e.pinned.has(db));
      const idle = this.executors.filter((e) => e.ready && !e.exited && e.inflight.length === 0);
      const ex = pin
        ? pin.ready && !pin.exited && pin.inflight.length === 0
          ? pin
          : undefined
        : (idle.find((e) => e.dbs.has(db)) ?? idle[0]);
      if (!ex) {
        if (!pin) waiting = true;
        i++;
        continue;
      }
      this.runnable.splice(i, 1);
      this.start(ex, job);
    }
    // Keep a spare: when no executor is idle any more, start one now rather than when the
    // next request arrives (a process takes tens of ms to start, more under tsx).
    const idle = this.executors.some((e) => e.inflight.length === 0 && !e.exited);
    if (
      (waiting || !idle) &&
      !this.executors.some((e) => !e.ready) &&
      this.executors.length < this.opts.maxSize
    ) {
      this.spawn();
    }
  }

  /** Hands a job to an idle executor, then pipelines whatever its lane has queued behind it. */
  private start(ex: Executor, job: ExecJob): void {
    ex.lane = job.lane;
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
    const id = this.nextId++;
    ex.inflight.push({ id, job });
    if (ex.inflight.length === 1) this.armDeadline(ex);
    if (job.op.op !== 'export') ex.dbs.add(job.op.db);
    ex.channel.write(encodeFrame({ ...job.op, id } satisfies ExecutorRequest));
  }

  /**
   * The first in-flight request starts its time limit now (the one before it just answered).
   * One timer per executor, re-armed only when it fires early or a shorter limit comes up,
   * so a fast request costs no setTimeout/clearTimeout pair.
   */
  private armDeadline(ex: Executor): void {
    const head = ex.inflight[0];
    if (!head) return;
    const now = performance.now();
    ex.deadline = now + head.job.timeoutMs;
    if (ex.timer && ex.timerAt <= ex.deadline) return;
    if (ex.timer) clearTimeout(ex.timer);
    ex.timerAt = ex.deadline;
    ex.timer = setTimeout(() => this.checkDeadline(ex), head.job.timeoutMs);
  }

  private checkDeadline(ex: Executor): void {
    ex.timer = null;
    if (ex.inflight.length === 0 || ex.exited) return;
    const left = ex.deadline - performance.now();
    if (left <= 0) {
      ex.killedFor = ex.inflight[0]?.id ?? null;
      ex.proc.kill('SIGKILL');
      return;
    }
    ex.timerAt = ex.deadline;
    ex.timer = setTimeout(() => this.checkDeadline(ex), left);
  }

  private spawn(): void {
    const proc = spawn(
      process.execPath,
      [...(isTs ? ['--import', 'tsx'] : []), ENTRY, JSON.stringify(this.opts.settings)],
      { stdio: ['ignore', 'inherit', 'inherit', 'pipe'] },
    );
    const channel = proc.stdio[3] as Socket;
    const ex: Executor = {
      proc,
      channel,
      ready: false,
      inflight: [],
      lane: null,
      deadline: 0,
      timer: null,
      timerAt: 0,
      killedFor: null,
      exited: false,
      controls: new Map(),
      dbs: new Set(),
      pinned: new Set(),
    };
    this.executors.push(ex);
    const reader = new FrameReader((json) => this.onMessage(ex, JSON.parse(json) as ExecutorResponse));
    channel.on('data', (chunk: Buffer) => reader.push(chunk));
    // A write to an executor that just died fails with EPIPE; its 'close' handles the rest.
    channel.on('error', () => undefined);
    // 'close' comes after the process exited and its channel was read to the end, so every
    // answer it wrote has been seen.
    proc.on('close', (code, signal) => this.onExit(ex, code, signal));
    proc.on('error', () => undefined);
  }

  private onMessage(ex: Executor, msg: ExecutorResponse): void {
    if ('ready' in msg) {
      ex.ready = true;
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
    this.armDeadline(ex);
    const job = cur.job;
    if (msg.ok && msg.pinned && job.op.op !== 'export') ex.pinned.add(job.op.db);
    if (msg.ok) job.resolve(msg.result);
    else job.reject(deserializeError(msg.error));
    this.finish(job);
    if (this.runnable.length > 0 || ex.inflight.length === 0) this.pump();
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
    if (cur) {
      // Requests pipelined behind the one that was running never started: back to the
      // front of their lane, to run on another executor once the lane moves on.
      const lane = cur.job.lane === null ? undefined : this.lanes.get(cur.job.lane);
      if (lane && notStarted.length > 0) {
        lane.active -= notStarted.length;
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
      const err = new DatabaseEngineError('EngineClosed', 'database engine is closed');
      for (const job of this.runnable.splice(0)) job.reject(err);
      for (const lane of this.lanes.values()) for (const job of lane.queue.splice(0)) job.reject(err);
      return;
    }
    if (this.executors.length < this.opts.size) this.spawn();
    this.pump();
  }
}
