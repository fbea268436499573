import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DatabaseEngineError, deserializeError } from './errors.js';
import type { ExecutorOp, ExecutorRequest, ExecutorResponse, ExecutorSettings } from './protocol.js';

/*
 * Executor pool. Design (docs/decisions.md, "Databases: engine"):
 * - `size` executor processes at start, growing to `maxSize` while every one is busy,
 *   so a slow query on one database never makes a query on another wait for it.
 * - One request at a time per database ("lane"), in arrival order: SQLite has one
 *   writer anyway, and it keeps connections of different executors from contending.
 * - A request goes to an idle executor, preferring one that already has the database
 *   open (warm connection and statement cache).
 * - Each executor runs one request at a time, so killing it on timeout (SIGKILL: the
 *   only way to stop a native sqlite3_step here) hurts nobody else; a replacement is
 *   spawned. SQLite rolls back the killed transaction on next open (WAL recovery).
 */

export interface PoolOptions {
  size: number;
  maxSize: number;
  settings: ExecutorSettings;
}

type Settle = { resolve: (v: unknown) => void; reject: (e: Error) => void };
type Job = Settle & { lane: string | null; timeoutMs: number } & (
    | { kind: 'exec'; op: ExecutorOp }
    | { kind: 'local'; fn: () => Promise<unknown> }
  );

interface Executor {
  proc: ChildProcess;
  ready: boolean;
  job: { id: number; job: Job & { kind: 'exec' }; timer: NodeJS.Timeout; timedOut: boolean } | null;
  controls: Map<number, () => void>;
  dbs: Set<string>;
  /** Databases whose connection here holds temp objects: they may run nowhere else. */
  pinned: Set<string>;
}

const isTs = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(`./executor-main.${isTs ? 'ts' : 'js'}`, import.meta.url));

export class ExecutorPool {
  private readonly executors: Executor[] = [];
  private readonly lanes = new Map<string, Job[]>();
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
      ex.proc.send({ id, op: 'close', db } satisfies ExecutorRequest);
    }
    await Promise.all(waits);
  }

  get stats(): { executors: number; busy: number; queued: number } {
    const busy = this.executors.filter((e) => e.job).length;
    return { executors: this.executors.length, busy, queued: this.runnable.length };
  }

  async close(): Promise<void> {
    this.closed = true;
    const err = new DatabaseEngineError('EngineClosed', 'database engine is closed');
    for (const job of this.runnable.splice(0)) job.reject(err);
    for (const q of this.lanes.values()) for (const job of q.splice(0)) job.reject(err);
    await Promise.all(
      this.executors.map(
        (ex) =>
          new Promise<void>((resolve) => {
            if (ex.proc.exitCode !== null || ex.proc.signalCode !== null) return resolve();
            ex.proc.once('exit', () => resolve());
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
      const queue = this.lanes.get(job.lane);
      if (queue) {
        queue.push(job);
        return;
      }
      this.lanes.set(job.lane, []);
    }
    this.runnable.push(job);
    this.pump();
  }

  private finish(job: Job): void {
    if (job.lane === null) return;
    const next = this.lanes.get(job.lane)?.shift();
    if (next) this.runnable.push(next);
    else this.lanes.delete(job.lane);
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
      const job = this.runnable[i];
      if (job.kind === 'local') break; // unreachable: moved out above
      const db = job.op.db;
      const pin = job.op.op === 'export' ? undefined : this.executors.find((e) => e.pinned.has(db));
      const idle = this.executors.filter((e) => e.ready && !e.job);
      const ex = pin
        ? pin.ready && !pin.job
          ? pin
          : undefined
        : (idle.find((e) => e.dbs.has(db)) ?? idle[0]);
      if (!ex) {
        if (!pin) waiting = true;
        i++;
        continue;
      }
      this.runnable.splice(i, 1);
      this.dispatch(ex, job);
    }
    // Keep a spare: when no executor is idle any more, start one now rather than when the
    // next request arrives (a process takes tens of ms to start, more under tsx).
    const idle = this.executors.some((e) => !e.job);
    if (
      (waiting || !idle) &&
      !this.executors.some((e) => !e.ready) &&
      this.executors.length < this.opts.maxSize
    ) {
      this.spawn();
    }
  }

  private dispatch(ex: Executor, job: Job & { kind: 'exec' }): void {
    const id = this.nextId++;
    const timer = setTimeout(() => {
      if (ex.job?.id !== id) return;
      ex.job.timedOut = true;
      ex.proc.kill('SIGKILL');
    }, job.timeoutMs);
    ex.job = { id, job, timer, timedOut: false };
    if (job.op.op !== 'export') ex.dbs.add(job.op.db);
    ex.proc.send({ ...job.op, id } satisfies ExecutorRequest);
  }

  private spawn(): void {
    const proc = fork(ENTRY, [JSON.stringify(this.opts.settings)], {
      execArgv: isTs ? ['--import', 'tsx'] : [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'json',
    });
    const ex: Executor = {
      proc,
      ready: false,
      job: null,
      controls: new Map(),
      dbs: new Set(),
      pinned: new Set(),
    };
    this.executors.push(ex);
    proc.on('message', (msg: ExecutorResponse) => this.onMessage(ex, msg));
    proc.on('exit', (code, signal) => this.onExit(ex, code, signal));
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
    const cur = ex.job;
    if (!cur || cur.id !== msg.id) return;
    clearTimeout(cur.timer);
    ex.job = null;
    if (msg.ok && msg.pinned && cur.job.op.op !== 'export') ex.pinned.add(cur.job.op.db);
    if (msg.ok) cur.job.resolve(msg.result);
    else cur.job.reject(deserializeError(msg.error));
    this.finish(cur.job);
    this.pump();
  }

  private onExit(ex: Executor, code: number | null, signal: NodeJS.Signals | null): void {
    const i = this.executors.indexOf(ex);
    if (i >= 0) this.executors.splice(i, 1);
    for (const done of ex.controls.values()) done();
    ex.controls.clear();
    const cur = ex.job;
    ex.job = null;
    if (cur) {
      clearTimeout(cur.timer);
      cur.job.reject(
        cur.timedOut
          ? new DatabaseEngineError(
              'QueryTimeout',
              `query stopped after the ${cur.job.timeoutMs} ms time limit; nothing it wrote was kept`,
            )
          : new DatabaseEngineError('EngineWorkerCrashed', `database executor exited (${signal ?? code})`),
      );
      this.finish(cur.job);
    }
    if (this.closed) return;
    if (this.executors.length < this.opts.size) this.spawn();
    this.pump();
  }
}
