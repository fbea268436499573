import { performance } from 'node:perf_hooks';
import { DatabaseSync, type StatementSyncInstance } from '@photostructure/sqlite';
import type { Connection, ResultColumns } from './connection.js';
import { DatabaseEngineError, serializeError } from './errors.js';
import type { ImportRequest, ImportResult, QueryRequest, QueryResult, SqlValue } from './schemas.js';
import { splitStatements } from './split-sql.js';
import { type Bindable, type BoundStatement, bindExact, unwrapName } from './exact-reals.js';
import { decodeArg, decodeArgs, encodedSize, encodeValue, quoteIdent } from './values.js';

type Bindings = BoundStatement['args'];

// The SQL work of one request, run synchronously inside an executor process.

/** How result values are put on the wire: nube's own encoding, or libSQL Hrana's typed values. */
export interface ValueEncoding<V> {
  encode(v: unknown): V;
  /** Rough wire size, for the result-size cap. */
  size(v: V): number;
}

const NUBE_ENCODING: ValueEncoding<SqlValue> = { encode: encodeValue, size: encodedSize };

export type StatementResult<V> = Omit<QueryResult, 'rows'> & { rows: V[][] };

/** Runs one statement and encodes its result, enforcing the row and byte caps. */
export function runStatement(conn: Connection, req: QueryRequest): QueryResult {
  return runEncoded(conn, req, NUBE_ENCODING);
}

/** runStatement with the values encoded by `enc`. */
export function runEncoded<V>(
  conn: Connection,
  req: QueryRequest,
  enc: ValueEncoding<V>,
): StatementResult<V> {
  const started = performance.now();
  const bound = bindExact(req.sql, decodeArgs(req.args));
  const entry = conn.statement(bound.sql, req.sql);
  const stmt = entry.stmt;
  const args = bound.args;
  const [before, schema] = conn.readBefore();
  const fresh = entry.columns !== null && entry.schema === schema;
  let cols = fresh && entry.columns ? entry.columns : describe(stmt, bound.rewritten);
  const rows: V[][] = [];
  if (cols.names.length === 0) {
    // No result set: run() reports SQLite's extended error code, iterate() does not.
    if (Array.isArray(args)) stmt.run(...args);
    else stmt.run(args);
  } else {
    readRows(conn, stmt, args, rows, enc);
  }
  if (!fresh) {
    // A cached statement may have been re-prepared after a schema change (SELECT *): its
    // columns are read after it ran, and kept for as long as the schema stays the same.
    cols = describe(stmt, bound.rewritten);
    entry.columns = cols;
    entry.schema = schema;
  }
  const [changes, total, rowid] = conn.readCounters();
  const written = Number(total - before);
  return {
    columns: cols.names,
    columnTypes: cols.types,
    rows,
    rowsAffected: written > 0 ? Number(changes) : 0,
    lastInsertRowid: written > 0 ? rowid.toString() : null,
    rowsRead: rows.length,
    rowsWritten: written,
    durationMs: round(performance.now() - started),
  };
}

/** Result columns; a statement with wrapped REAL placeholders reports the names the client's SQL has. */
function describe(stmt: StatementSyncInstance, rewritten: boolean): ResultColumns {
  const cols = stmt.columns();
  return {
    names: cols.map((c) => (rewritten ? unwrapName(c.name) : c.name)),
    types: cols.map((c) => c.type),
  };
}

function readRows<V>(
  conn: Connection,
  stmt: StatementSyncInstance,
  args: Bindings,
  rows: V[][],
  enc: ValueEncoding<V>,
): void {
  const { maxResultRows, maxResultBytes } = conn.settings;
  let bytes = 0;
  const it = (Array.isArray(args) ? stmt.iterate(...args) : stmt.iterate(args)) as IterableIterator<
    unknown[]
  >;
  try {
    for (const raw of it) {
      const row = raw.map(enc.encode);
      for (const v of row) bytes += enc.size(v);
      rows.push(row);
      if (rows.length > maxResultRows || bytes > maxResultBytes) {
        throw new DatabaseEngineError(
          'ResultTooLarge',
          `result exceeds ${maxResultRows} rows or ${maxResultBytes} bytes; add LIMIT or select fewer columns`,
        );
      }
    }
  } catch (err) {
    throw withCode(err);
  } finally {
    // Resets the statement if iteration stopped early, releasing its read lock.
    it.return?.();
  }
}

// iterate() throws without SQLite's code; these are SQLite's own constraint messages
// (sqlite3HaltConstraint), used only to name the code of an error that already happened.
const CONSTRAINT_MESSAGES: [string, string][] = [
  ['UNIQUE constraint failed', 'SQLITE_CONSTRAINT_UNIQUE'],
  ['NOT NULL constraint failed', 'SQLITE_CONSTRAINT_NOTNULL'],
  ['CHECK constraint failed', 'SQLITE_CONSTRAINT_CHECK'],
  ['FOREIGN KEY constraint failed', 'SQLITE_CONSTRAINT_FOREIGNKEY'],
  ['cannot store', 'SQLITE_CONSTRAINT_DATATYPE'],
];

function withCode(err: unknown): unknown {
  const e = err as { errcode?: unknown; message?: unknown };
  if (
    err instanceof DatabaseEngineError ||
    typeof e?.errcode === 'number' ||
    typeof e?.message !== 'string'
  ) {
    return err;
  }
  const msg = e.message as string;
  const hit = CONSTRAINT_MESSAGES.find(([prefix]) => msg.startsWith(prefix));
  return new DatabaseEngineError(hit ? hit[1] : 'SQLITE_ERROR', msg);
}

/** Errors from SQLite get their extended code; SQLITE_AUTH says why; SQLITE_FULL at the cap says so. */
export function explain(conn: Connection, err: unknown, statementIndex?: number): DatabaseEngineError {
  const s = serializeError(err);
  let { code, message } = s;
  if (conn.policy.lastDenied && /not authorized/.test(message))
    message = `${message}: ${conn.policy.lastDenied}`;
  if (code === 'SQLITE_FULL' && conn.atSizeLimit()) {
    code = 'DatabaseTooLarge';
    message = `database size limit of ${conn.maxBytes} bytes reached`;
  }
  if (message === 'Statement is not properly initialized') {
    code = 'InvalidRequest';
    message = 'the SQL text contains no statement';
  }
  conn.policy.lastDenied = null;
  return new DatabaseEngineError(code, message, statementIndex ?? s.statementIndex);
}

/**
 * One `sql` text. Several statements in it run in order in one transaction, and the
 * result is the last one's, with rowsRead/rowsWritten/duration summed over all.
 */
export function query(conn: Connection, req: QueryRequest, statementIndex?: number): QueryResult {
  const pieces = splitStatements(req.sql);
  if (pieces.length <= 1) {
    try {
      return runStatement(conn, req);
    } catch (err) {
      throw explain(conn, err, statementIndex);
    }
  }
  if (req.args !== undefined && (!Array.isArray(req.args) || req.args.length > 0)) {
    throw new DatabaseEngineError('InvalidRequest', 'args need exactly one statement in sql; use a batch');
  }
  const run = () => {
    const results = pieces.map((sql) => {
      try {
        return runStatement(conn, { sql });
      } catch (err) {
        throw explain(conn, err, statementIndex);
      }
    });
    const last = results[results.length - 1];
    const sum = (f: (r: QueryResult) => number) => results.reduce((n, r) => n + f(r), 0);
    return {
      ...last,
      rowsRead: sum((r) => r.rowsRead),
      rowsWritten: sum((r) => r.rowsWritten),
      durationMs: round(sum((r) => r.durationMs)),
    };
  };
  return conn.inTransaction ? run() : inTransaction(conn, run);
}

/** All statements in one IMMEDIATE transaction; any failure rolls back every one of them. */
export function batch(conn: Connection, statements: QueryRequest[]): QueryResult[] {
  return inTransaction(conn, () => statements.map((st, i) => query(conn, st, i)));
}

const CONFLICT = { abort: 'ABORT', ignore: 'IGNORE', replace: 'REPLACE' } as const;

/** One INSERT prepared once, run per row, in one transaction. Names are always quoted. */
export function importRows(conn: Connection, req: ImportRequest): ImportResult {
  const verb = CONFLICT[req.onConflict ?? 'abort'];
  const cols = req.columns.map(quoteIdent).join(', ');
  const marks = req.columns.map(() => '?').join(', ');
  const sql = `INSERT OR ${verb} INTO ${quoteIdent(req.table)} (${cols}) VALUES (${marks})`;
  return inTransaction(conn, () => {
    let plain: StatementSyncInstance;
    try {
      plain = conn.statement(sql).stmt;
    } catch (err) {
      throw explain(conn, err);
    }
    let imported = 0;
    req.rows.forEach((row, i) => {
      if (row.length !== req.columns.length) {
        throw new DatabaseEngineError(
          'InvalidRequest',
          `row ${i} has ${row.length} values for ${req.columns.length} columns`,
        );
      }
      try {
        // A row with REAL values the binding would make INTEGERs runs a rewritten INSERT of its own.
        const bound = bindExact(sql, row.map(decodeArg));
        const stmt = bound.rewritten ? conn.statement(bound.sql, sql).stmt : plain;
        imported += Number(stmt.run(...(bound.args as Bindable[])).changes);
      } catch (err) {
        const e = explain(conn, err);
        throw new DatabaseEngineError(e.code, `row ${i}: ${e.message}`);
      }
    });
    return { imported, total: req.rows.length };
  });
}

function inTransaction<T>(conn: Connection, fn: () => T): T {
  try {
    conn.engineExec('BEGIN IMMEDIATE');
  } catch (err) {
    throw explain(conn, err);
  }
  try {
    const out = fn();
    conn.engineExec('COMMIT');
    return out;
  } catch (err) {
    if (conn.inTransaction) conn.engineExec('ROLLBACK');
    throw err instanceof DatabaseEngineError ? err : explain(conn, err);
  }
}

/**
 * Consistent snapshot into `target` (a path the engine chose). A fresh read-only
 * connection without the user policy runs VACUUM INTO: it reads one WAL snapshot, so
 * writers on other connections go on while it copies.
 */
export function exportTo(path: string, target: string, busyTimeoutMs: number): void {
  const db = new DatabaseSync(path, { readOnly: true, timeout: busyTimeoutMs });
  try {
    db.prepare('VACUUM INTO ?').run(target);
  } catch (err) {
    const s = serializeError(err);
    throw new DatabaseEngineError(s.code, s.message);
  } finally {
    db.close();
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
