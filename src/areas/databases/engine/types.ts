import type { HranaRequest, HranaResult } from './hrana-types.js';
import type { ImportRequest, ImportResult, QueryRequest, QueryResult } from './schemas.js';
import type { DatabaseUsage } from './usage.js';

/** A consistent copy of a database file, owned by the caller until `dispose()`. */
export interface DatabaseSnapshot {
  /** Path of a complete SQLite file (no -wal needed), inside the engine's directory. */
  path: string;
  sizeBytes: number;
  /** Removes the snapshot file. */
  dispose(): Promise<void>;
}

/** Per-request limits tighter than the engine's own. */
export interface RequestLimits {
  /** Size cap of the database for this request (e.g. what is left of the owner's storage plan). */
  maxBytes?: number;
  /**
   * Whose request this is (an owner id): executors are shared fairly between owners, each with its
   * own queue and share. Default: the database id, i.e. every database is an owner of its own.
   */
  owner?: string;
}

/**
 * User databases, keyed by id. Knows nothing of HTTP, owners or metadata: the databases
 * service maps ids, plans and errors. Every method is async and runs SQL off the event loop.
 * Errors are `DatabaseEngineError` (see errors.ts).
 */
export interface DatabaseEngine {
  create(id: string, limits?: Pick<RequestLimits, 'owner'>): Promise<void>;
  /** Removes every file of the database (db, -wal, -shm); a no-op when absent. */
  delete(id: string): Promise<void>;
  exists(id: string): Promise<boolean>;
  /** Latest modification of the database file or its WAL (ms since the epoch); 0 when absent. */
  changedAt(id: string): Promise<number>;
  /** The database's file (its WAL is beside it, `-wal`): the history shipper reads both. */
  filePath(id: string): Promise<string>;
  /** A fresh path inside the engine's directory where a copy to `install` can be written. */
  stagingPath(id: string): Promise<string>;
  /** Makes the complete SQLite file at `source` the database `id`, replacing its files (on its lane). */
  install(id: string, source: string): Promise<void>;
  /** Moves the database's files aside (never served again): the database lives on another node now. */
  archive(id: string): Promise<void>;
  /** Ids of the databases whose files are here. */
  localIds(): Promise<string[]>;
  /** Bytes on disk: the database file plus its WAL. */
  sizeBytes(id: string): Promise<number>;
  usage(id: string): Promise<DatabaseUsage>;
  query(id: string, req: QueryRequest, limits?: RequestLimits): Promise<QueryResult>;
  batch(id: string, statements: QueryRequest[], limits?: RequestLimits): Promise<QueryResult[]>;
  import(id: string, req: ImportRequest, limits?: RequestLimits): Promise<ImportResult>;
  export(id: string, limits?: Pick<RequestLimits, 'owner'>): Promise<DatabaseSnapshot>;
  /** libSQL Hrana steps, on the shared connection or on a stream's own (`req.stream`). */
  hrana(id: string, req: HranaRequest, limits?: RequestLimits): Promise<HranaResult>;
  /** Ends a stream: its connection closes, rolling back whatever transaction it had open. */
  closeStream(id: string, stream: string): Promise<void>;
  close(): Promise<void>;
}

export interface EmbeddedEngineOptions {
  /** Directory holding `<id>.sqlite` files; created if missing. */
  dir: string;
  /** Executor processes kept running, the pool's minimum (default: available cores + 1, at least 3). */
  workers?: number;
  /** Upper bound when all are busy (default: 2 x workers). */
  maxWorkers?: number;
  /** Executors one owner may hold at once (default: workers - 1, at least 1). */
  maxWorkersPerOwner?: number;
  /** Requests one owner may have waiting for an executor; more fail with QueueFull (default 1000). */
  maxQueuedPerOwner?: number;
  /** Executors beyond `workers` that have been idle this long are ended, in ms (default 30,000). */
  idleMs?: number;
  /** A request waiting this long for an executor fails with QueueTimeout, never run (ms, default 60,000). */
  maxQueueWaitMs?: number;
  /** Time limit of query, batch and import in ms (default 10,000). */
  timeoutMs?: number;
  /** Time limit of export in ms (default 120,000). */
  exportTimeoutMs?: number;
  /** Largest database file in bytes, enforced with max_page_count (default 1 GiB). */
  maxDatabaseBytes?: number;
  /** Result caps per statement (defaults 50,000 rows, 16 MiB of encoded values). */
  maxResultRows?: number;
  maxResultBytes?: number;
  /** Largest string or blob value (SQLITE_LIMIT_LENGTH, default 16 MiB). */
  maxValueBytes?: number;
  /** WAL synchronous mode (default 'full': an acknowledged write survives power loss). */
  synchronous?: 'full' | 'normal';
  busyTimeoutMs?: number;
  /** False: connections never checkpoint; the history shipper does, once it read the frames (default true). */
  autoCheckpoint?: boolean;
  /** Connections an executor keeps open (default 64). */
  maxOpenConnections?: number;
}
