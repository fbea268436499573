import type { ConnectionSettings } from './connection.js';
import type { SerializedError } from './errors.js';
import type { HranaStep } from './hrana-types.js';
import type { ImportRequest, QueryRequest } from './schemas.js';

// Messages between the pool (parent) and an executor process: length-prefixed JSON frames
// (framing.ts) on file descriptor 3 of the executor. Values are already in their wire
// encoding, so nothing is re-encoded. Answers come back in request order.

/** The executor's end of the channel (stdio slot 3, a socketpair). */
export const CHANNEL_FD = 3;

export type ExecutorOp =
  | { op: 'query'; db: string; path: string; req: QueryRequest; maxBytes?: number }
  | { op: 'batch'; db: string; path: string; statements: QueryRequest[]; maxBytes?: number }
  | { op: 'import'; db: string; path: string; req: ImportRequest; maxBytes?: number }
  /** `db` is the connection's key: the database id, or `<id>~<stream>` for a stream's own connection. */
  | { op: 'hrana'; db: string; path: string; steps: HranaStep[]; stream: boolean; resume: boolean; maxBytes?: number }
  | { op: 'create'; db: string; path: string }
  | { op: 'export'; db: string; path: string; target: string }
  | { op: 'close'; db: string };

export type ExecutorRequest = ExecutorOp & { id: number };

export type ExecutorResponse =
  | { id: number; ok: true; result: unknown; pinned: boolean }
  | { evicted: string }
  | { id: number; ok: false; error: SerializedError }
  | { ready: true };

export type ExecutorSettings = ConnectionSettings & { maxOpenConnections: number };
