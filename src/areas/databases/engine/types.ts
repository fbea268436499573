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
}

/**
 * User databases, keyed by id. Knows nothing of HTTP, owners or metadata: the databases
 * service maps ids, plans and errors. Every method is async and runs SQL off the event loop.
 * Errors are `DatabaseEngineError` (see errors.ts).
 */
export interface DatabaseEngine {
  create(id: string): Promise<void>;
  /** Removes every file of the database (db, -wal, -shm); a no-op when absent. */
  delete(id: string): Promise<void>;
  exists(id: string): Promise<boolean>;
  /** Bytes on disk: the database file plus its WAL. */
  sizeBytes(id: string): Promise<number>;
  usage(id: string): Promise<DatabaseUsage>;
  query(id: string, req: QueryRequest, limits?: RequestLimits): Promise<QueryResult>;
  batch(id: string, statements: QueryRequest[], limits?: RequestLimits): Promise<QueryResult[]>;
  import(id: string, req: ImportRequest, limits?: RequestLimits): Promise<ImportResult>;
  export(id: string): Promise<DatabaseSnapshot>;
  close(): Promise<void>;
}

export interface EmbeddedEngineOptions {
  /** Directory holding `<id>.sqlite` files; created if missing. */
  dir: string;
  /** Executor processes kept running (default: available cores + 1, at least 3). */
  workers?: number;
  /** Upper bound when all are busy (default: 4 x workers). */
  maxWorkers?: number;
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
  /** Connections an executor keeps open (default 64). */
  maxOpenConnections?: number;
}
