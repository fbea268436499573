import { existsSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type DatabaseSyncInstance, type StatementSyncInstance } from '@photostructure/sqlite';
import { DatabaseEngineError } from './errors.js';
import { decodeReal, REAL_FUNCTION } from './exact-reals.js';
import { installPolicy, type PolicyState } from './policy.js';

/** Settings an executor process applies to every connection it opens. */
export interface ConnectionSettings {
  synchronous: 'full' | 'normal';
  maxDatabaseBytes: number;
  maxResultRows: number;
  maxResultBytes: number;
  busyTimeoutMs: number;
  /**
   * False when the history shipper checkpoints (databases/copies.ts, after it read the frames):
   * connections then never checkpoint on their own (wal_autocheckpoint=0). Default true.
   */
  autoCheckpoint?: boolean;
  /** sqlite3_limit(SQLITE_LIMIT_LENGTH): largest string or blob. */
  maxValueBytes: number;
}

const STATEMENT_CACHE = 128;

/** Column names and declared types of a statement's result (empty when it returns no rows). */
export interface ResultColumns {
  names: string[];
  types: (string | null)[];
}

/**
 * A cached prepared statement with its result columns as of schema version `schema`.
 * Asking the binding for columns builds an object per column through N-API (~7 us for
 * five columns, more than the point query itself), so they are kept until the schema changes.
 */
export interface CachedStatement {
  stmt: StatementSyncInstance;
  columns: ResultColumns | null;
  schema: bigint;
}

/** One hardened SQLite connection plus its statement cache. Lives inside an executor process. */
export class Connection {
  readonly db: DatabaseSyncInstance;
  readonly policy: PolicyState = { trusted: false, tempTouched: false, lastDenied: null };
  /** Held by one libSQL stream (its transaction may be open between requests): never evicted. */
  stream = false;
  private readonly stmts = new Map<string, CachedStatement>();
  private readonly counters: StatementSyncInstance;
  private readonly countersBefore: StatementSyncInstance;
  private readonly schemaProbe: StatementSyncInstance;
  private readonly pageSize: number;
  private maxPages: number;

  constructor(
    readonly path: string,
    readonly settings: ConnectionSettings,
    create: boolean,
  ) {
    // The binding cannot open without SQLITE_OPEN_CREATE, so a missing file is checked first:
    // a query must never conjure up a database that was deleted or never created.
    if (!create && !existsSync(path)) throw new DatabaseEngineError('DatabaseNotFound', 'database not found');
    this.db = new DatabaseSync(path, {
      readBigInts: true,
      returnArrays: true,
      allowExtension: false,
      defensive: true,
      enableForeignKeyConstraints: true,
      enableDoubleQuotedStringLiterals: false,
      timeout: settings.busyTimeoutMs,
      limits: {
        attach: 0,
        length: settings.maxValueBytes,
        sqlLength: 1_000_000,
        triggerDepth: 100,
      },
    });
    // Engine pragmas run before the authorizer exists; users cannot change any of them.
    // busy_timeout is set by the `timeout` option above, before WAL as pocketbase does.
    const pageSize = Number(firstCell(this.db.prepare('PRAGMA page_size')));
    const maxPages = Math.max(1, Math.floor(settings.maxDatabaseBytes / pageSize));
    this.pageSize = pageSize;
    this.maxPages = maxPages;
    this.db.exec(
      [
        'PRAGMA journal_mode=WAL',
        `PRAGMA synchronous=${settings.synchronous === 'full' ? 'FULL' : 'NORMAL'}`,
        'PRAGMA trusted_schema=OFF',
        'PRAGMA journal_size_limit=67108864',
        `PRAGMA wal_autocheckpoint=${settings.autoCheckpoint === false ? 0 : 1000}`,
        `PRAGMA max_page_count=${maxPages}`,
        `PRAGMA temp.max_page_count=${maxPages}`,
      ].join(';'),
    );
    // REAL arguments the binding would turn into INTEGERs arrive as their 8 bytes (exact-reals.ts).
    // Direct only: a view or trigger cannot depend on it.
    this.db.function(REAL_FUNCTION, { deterministic: true, directOnly: true }, decodeReal);
    installPolicy(this.db, this.policy);
    this.counters = this.db.prepare('SELECT changes(), total_changes(), last_insert_rowid()');
    this.countersBefore = this.trusted(() =>
      this.db.prepare('SELECT total_changes(), (SELECT schema_version FROM pragma_schema_version)'),
    );
    this.schemaProbe = this.trusted(() => this.db.prepare('SELECT 1 FROM sqlite_schema LIMIT 0'));
  }

  /** Cached prepared statement; SQLite re-prepares (and re-authorizes) it after schema changes. */
  prepare(sql: string): StatementSyncInstance {
    return this.statement(sql).stmt;
  }

  /**
   * The cache entry of `sql` (most recently used last), prepared on a miss. `original` is the SQL as
   * the client sent it when `sql` is a rewriting of it (exact-reals.ts): its error is the one to report.
   */
  statement(sql: string, original = sql): CachedStatement {
    const hit = this.stmts.get(sql);
    if (hit) {
      this.stmts.delete(sql);
      this.stmts.set(sql, hit);
      return hit;
    }
    this.freshSchema();
    let stmt: StatementSyncInstance;
    try {
      stmt = this.db.prepare(sql);
    } catch (err) {
      if (original !== sql) this.db.prepare(original);
      throw err;
    }
    const entry: CachedStatement = { stmt, columns: null, schema: -1n };
    this.stmts.set(sql, entry);
    if (this.stmts.size > STATEMENT_CACHE) {
      const oldest = this.stmts.keys().next().value;
      if (oldest !== undefined) this.stmts.delete(oldest);
    }
    return entry;
  }

  /**
   * Compiles `sql` afresh (never cached: the authorizer must see it) for Hrana's `describe`: its
   * result columns, and whether it writes (the binding has no sqlite3_stmt_readonly).
   */
  describe(sql: string): { columns: ResultColumns; writes: boolean } {
    this.freshSchema();
    const seen = { writes: false };
    this.policy.describing = seen;
    try {
      const cols = this.db.prepare(sql).columns();
      return {
        columns: { names: cols.map((c) => c.name), types: cols.map((c) => c.type) },
        writes: seen.writes,
      };
    } finally {
      this.policy.describing = undefined;
    }
  }

  /**
   * Makes this connection's copy of the schema current before a statement is compiled. SQLite
   * compiles against the schema it last loaded and only notices another connection's DDL when a
   * statement starts its transaction (it then re-compiles); but some errors are raised while
   * compiling, from the old copy: after DROP TABLE t and CREATE TABLE t on another executor,
   * `CREATE INDEX i ...` with the dropped index's name failed here with "index i already exists".
   * A statement reading sqlite_schema checks the schema cookie and reloads the schema if it moved.
   */
  private freshSchema(): void {
    this.trusted(() => this.schemaProbe.get());
  }

  /**
   * [total_changes(), schema version] before a statement runs. The schema version (the
   * header's schema cookie) tells whether a statement's cached columns still hold; engine
   * SQL, so it runs trusted (the statement may be re-prepared after a schema change).
   */
  readBefore(): [bigint, bigint] {
    return this.trusted(() => this.countersBefore.get()) as unknown as [bigint, bigint];
  }

  /** The size cap in force on this connection (the engine's, or a smaller one from the request). */
  get maxBytes(): number {
    return this.maxPages * this.pageSize;
  }

  /**
   * Caps the main database at `bytes` (never above the engine's cap) for the coming request: the
   * service passes what is left of the owner's plan storage. SQLite keeps the cap at the current
   * size when asked for less, so a full database still serves reads, updates in place and deletes.
   */
  limitSize(bytes: number | undefined): void {
    const cap = Math.min(this.settings.maxDatabaseBytes, bytes ?? Number.POSITIVE_INFINITY);
    const pages = Math.max(1, Math.floor(cap / this.pageSize));
    if (pages === this.maxPages) return;
    const row = this.trusted(() => this.db.prepare(`PRAGMA max_page_count=${pages}`).get()) as unknown;
    this.maxPages = Number((row as unknown[] | undefined)?.[0] ?? pages);
  }

  /** [changes(), total_changes(), last_insert_rowid()] of this connection. */
  readCounters(): [bigint, bigint, bigint] {
    return this.counters.get() as unknown as [bigint, bigint, bigint];
  }

  /** Runs engine-issued SQL (transaction control, size checks) that the authorizer refuses to users. */
  trusted<T>(fn: () => T): T {
    this.policy.trusted = true;
    try {
      return fn();
    } finally {
      this.policy.trusted = false;
    }
  }

  engineExec(sql: string): void {
    this.trusted(() => this.db.exec(sql));
  }

  get inTransaction(): boolean {
    return this.db.isTransaction;
  }

  /**
   * SQLITE_FULL means the max_page_count cap or a full disk. The failed statement is rolled
   * back, so page_count cannot tell; free space on the disk can.
   */
  atSizeLimit(): boolean {
    try {
      const fs = statfsSync(dirname(this.path));
      return fs.bavail * fs.bsize > 64 * 1024 * 1024;
    } catch {
      return false;
    }
  }

  close(): void {
    this.stmts.clear();
    // A stream's connection may close inside its transaction: end it now, not whenever the
    // statements are collected (until then SQLite keeps the connection, and its locks, alive).
    if (this.db.isOpen && this.db.isTransaction) {
      try {
        this.engineExec('ROLLBACK');
      } catch {
        // Closing rolls back anyway once nothing holds the connection.
      }
    }
    if (this.db.isOpen) this.db.close();
  }
}

function firstCell(stmt: StatementSyncInstance): unknown {
  const row = stmt.get() as unknown as unknown[] | undefined;
  return row?.[0];
}
