import { type ChildProcess, spawn } from 'node:child_process';
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
  /** Counted in its owner's queue (not yet sent to an executor, nor started locally). */
  waiting: boolean;
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

/** Starts an executor process; the callbacks see its messages and its exit. */
export function spawnExecutor(
  settings: ExecutorSettings,
  onMessage: (ex: Executor, msg: ExecutorResponse) => void,
  onExit: (ex: Executor, code: number | null, signal: NodeJS.Signals | null) => void,
): Executor {
  const proc = spawn(process.execPath, [...(isTs ? ['--import', 'tsx'] : []), ENTRY, JSON.stringify(settings)], {
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
    deadline: 0,
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
