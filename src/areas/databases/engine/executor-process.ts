import { type ChildProcess, spawn } from 'node:child_process';
import { getPriority, setPriority } from 'node:os';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { FrameReader } from './framing.js';
import type { ExecutorOp, ExecutorResponse, ExecutorSettings } from './protocol.js';

// One executor process as the pool sees it (pool.ts decides what runs where).

type Settle = { resolve: (v: unknown) => void; reject: (e: Error) => void };

/** A request of the pool: `owner` is whose share of executors it uses, `lane` its database. */
export type Job = Settle & {
  lane: string | null;
  owner: string;
  timeoutMs: number;
  /** Counted in its owner's queue (not yet sent to an executor, nor started locally), since `queuedAt`. */
  waiting: boolean;
  queuedAt: number;
} & ({ kind: 'exec'; op: ExecutorOp } | { kind: 'local'; fn: () => Promise<unknown> });
export type ExecJob = Job & { kind: 'exec' };

export interface Executor {
  proc: ChildProcess;
  channel: Socket;
  ready: boolean;
  /** Requests sent and not answered, in order; the first one is running. */
  inflight: { id: number; job: ExecJob }[];
  /** The lane of the in-flight requests (null for lane-less ones, never pipelined). */
  lane: string | null;
  /** The owner whose share this executor counts against while it has requests in flight. */
  owner: string | null;
  /** When it last became idle (performance.now() ms): idle ones beyond the minimum are ended. */
  idleSince: number;
  /** When the running request started, and when it overruns its limit (performance.now() ms). */
  startedAt: number;
  deadline: number;
  /** Running at a lowered CPU priority (a long request; see armDeadline). */
  niced: boolean;
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

/** Starts an executor process; the callbacks see its messages and its exit. */
export function spawnExecutor(
  settings: ExecutorSettings,
  onMessage: (ex: Executor, msg: ExecutorResponse) => void,
  onExit: (ex: Executor, code: number | null, signal: NodeJS.Signals | null) => void,
): Executor {
  const proc = spawn(process.execPath, ['--expose-gc', ...(isTs ? ['--import', 'tsx'] : []), ENTRY, JSON.stringify(settings)], {
    stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
  });
  const channel = proc.stdio[3] as Socket;
  const ex: Executor = {
    proc,
    channel,
    ready: false,
    inflight: [],
    lane: null,
    owner: null,
    idleSince: performance.now(),
    startedAt: 0,
    deadline: 0,
    niced: false,
    timer: null,
    timerAt: 0,
    killedFor: null,
    exited: false,
    controls: new Map(),
    dbs: new Set(),
    pinned: new Set(),
  };
  const reader = new FrameReader((json) => onMessage(ex, JSON.parse(json) as ExecutorResponse));
  channel.on('data', (chunk: Buffer) => reader.push(chunk));
  // A write to an executor that just died fails with EPIPE; its 'close' handles the rest.
  channel.on('error', () => undefined);
  // 'close' comes after the process exited and its channel was read to the end, so every
  // answer it wrote has been seen.
  proc.on('close', (code, signal) => onExit(ex, code, signal));
  proc.on('error', () => undefined);
  return ex;
}

/** Ready, alive and running nothing. */
export function isIdle(ex: Executor): boolean {
  return ex.ready && !ex.exited && ex.inflight.length === 0;
}

/** A request running this long is a long one: its executor gets a lower CPU priority until it answers. */
export const LONG_REQUEST_MS = 100;
/** Nice steps added for a long request (CFS weight 110 against 1024: a tenth of a core's share when others want it). */
const LONG_NICE = 10;
/** The niceness executors start with: nube's own (they inherit it). */
const BASE_NICE = getPriority();

/**
 * The first in-flight request starts its time limit now (the one before it just answered).
 * One timer per executor, re-armed only when it fires early or a sooner wake-up comes up, so a
 * fast request costs no setTimeout/clearTimeout pair: it wakes at most every LONG_REQUEST_MS
 * while the executor is busy, to lower the priority of a long request, and at the time limit.
 */
export function armDeadline(ex: Executor): void {
  const head = ex.inflight[0];
  if (!head) return;
  // The long request (if any) is over: the next one starts at normal priority.
  restorePriority(ex);
  const now = performance.now();
  ex.startedAt = now;
  ex.deadline = now + head.job.timeoutMs;
  const wake = nextWake(ex);
  if (ex.timer && ex.timerAt <= wake) return;
  if (ex.timer) clearTimeout(ex.timer);
  setTimer(ex, wake, now);
}

function nextWake(ex: Executor): number {
  return ex.niced ? ex.deadline : Math.min(ex.deadline, ex.startedAt + LONG_REQUEST_MS);
}

function setTimer(ex: Executor, at: number, now: number): void {
  ex.timerAt = at;
  ex.timer = setTimeout(() => checkDeadline(ex), Math.max(0, at - now));
}

/** SIGKILL past the time limit (the only way to stop a native sqlite3_step here), nice past LONG_REQUEST_MS. */
function checkDeadline(ex: Executor): void {
  ex.timer = null;
  if (ex.inflight.length === 0 || ex.exited) return;
  const now = performance.now();
  if (ex.deadline - now <= 0) {
    ex.killedFor = ex.inflight[0]?.id ?? null;
    ex.proc.kill('SIGKILL');
    return;
  }
  if (now - ex.startedAt >= LONG_REQUEST_MS) lowerPriority(ex);
  setTimer(ex, nextWake(ex), now);
}

function renice(ex: Executor, nice: number): boolean {
  if (ex.proc.pid === undefined || ex.exited) return false;
  try {
    setPriority(ex.proc.pid, nice);
    ex.niced = nice > BASE_NICE;
    return true;
  } catch {
    // Raising the priority back needs CAP_SYS_NICE (or RLIMIT_NICE): the pool then prefers others.
    return false;
  }
}

/** Lower priority for work nobody waits on (a spare executor starting). */
export function lowerPriority(ex: Executor): void {
  if (!ex.niced) renice(ex, Math.min(19, BASE_NICE + LONG_NICE));
}

/** Back to normal priority once idle (when allowed). */
export function restorePriority(ex: Executor): void {
  if (ex.niced) renice(ex, BASE_NICE);
}
