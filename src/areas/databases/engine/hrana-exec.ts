import type { Connection } from './connection.js';
import { DatabaseEngineError } from './errors.js';
import { explain, runEncoded, type ValueEncoding } from './executor.js';
import type {
  HranaCond,
  HranaDescribeResult,
  HranaError,
  HranaRequest,
  HranaResult,
  HranaStep,
  HranaStepOutcome,
  HranaStmt,
  HranaStmtResult,
  HranaValue,
} from './hrana-types.js';
import { scanParams } from './exact-reals.js';
import { skippedEnd, splitStatements } from './split-sql.js';
import { primaryCodeName } from './sqlite-codes.js';

// libSQL Hrana steps, run synchronously inside an executor process on one connection, through the
// same statement path as /query (authorizer, caps, explain()). Hrana lets a stream control its own
// transactions, so the connection's policy admits BEGIN/COMMIT/ROLLBACK while a stream holds it.

/** SQLite value (readBigInts) -> Hrana Value: INTEGER always as a decimal string, so nothing is rounded. */
const HRANA_ENCODING: ValueEncoding<HranaValue> = {
  encode(v) {
    if (v === null) return { type: 'null' };
    if (typeof v === 'bigint') return { type: 'integer', value: v.toString() };
    if (typeof v === 'number') return { type: 'float', value: Object.is(v, -0) ? '-0' : v };
    if (typeof v === 'string') return { type: 'text', value: v };
    if (v instanceof Uint8Array)
      return { type: 'blob', base64: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') };
    throw new DatabaseEngineError('SQLITE_MISMATCH', `unexpected value type from SQLite: ${typeof v}`);
  },
  size(v) {
    if (v.type === 'text') return v.value.length + 24;
    if (v.type === 'blob') return v.base64.length + 24;
    return 32;
  },
};

/** libSQL's read-only transaction (the client's `read` mode), which SQLite itself cannot parse. */
const BEGIN_READONLY = /^\s*BEGIN\s+(?:TRANSACTION\s+)?READONLY\s*;?\s*$/i;

/** Runs a stream's steps; each step succeeds or fails on its own, as Hrana's pipeline wants. */
export function runHrana(conn: Connection, req: HranaRequest): HranaResult {
  const out: HranaResult = { outcomes: [], rowsRead: 0, rowsWritten: 0 };
  conn.policy.hrana = true;
  try {
    for (const step of req.steps) out.outcomes.push(runStep(conn, step, out));
  } finally {
    if (req.stream === undefined) release(conn);
  }
  return out;
}

/** The shared connection goes back to what /query expects: no open transaction, foreign keys on. */
function release(conn: Connection): void {
  if (conn.inTransaction) conn.engineExec('ROLLBACK');
  endReadOnly(conn);
  if (conn.policy.fkChanged) conn.engineExec('PRAGMA foreign_keys=ON');
  conn.policy.fkChanged = false;
  conn.policy.hrana = false;
}

function runStep(conn: Connection, step: HranaStep, totals: HranaResult): HranaStepOutcome {
  try {
    switch (step.type) {
      case 'execute':
        return { ok: true, response: { type: 'execute', result: execute(conn, step.stmt, totals) } };
      case 'batch':
        return { ok: true, response: { type: 'batch', result: batch(conn, step.steps, totals) } };
      case 'sequence':
        for (const sql of splitStatements(step.sql)) execute(conn, { sql, wantRows: false }, totals);
        return { ok: true, response: { type: 'sequence' } };
      case 'get_autocommit':
        return { ok: true, response: { type: 'get_autocommit', is_autocommit: !conn.inTransaction } };
      case 'describe':
        return { ok: true, response: { type: 'describe', result: describe(conn, step.sql) } };
    }
  } catch (err) {
    return { ok: false, error: toHranaError(conn, err) };
  }
}

function execute(conn: Connection, stmt: HranaStmt, totals: HranaResult): HranaStmtResult {
  try {
    if (BEGIN_READONLY.test(stmt.sql)) return beginReadOnly(conn);
    const r = runEncoded(conn, { sql: stmt.sql, args: stmt.args }, HRANA_ENCODING);
    totals.rowsRead += r.rowsRead;
    totals.rowsWritten += r.rowsWritten;
    return {
      cols: r.columns.map((name, i) => ({ name, decltype: r.columnTypes[i] ?? null })),
      rows: stmt.wantRows ? r.rows : [],
      affected_row_count: r.rowsAffected,
      last_insert_rowid: r.lastInsertRowid,
      rows_read: r.rowsRead,
      rows_written: r.rowsWritten,
      query_duration_ms: r.durationMs,
    };
  } catch (err) {
    throw explain(conn, err);
  } finally {
    // COMMIT or ROLLBACK of a read-only transaction ends its read-only mode.
    if (!conn.inTransaction) endReadOnly(conn);
  }
}

/** Hrana `describe`: the statement is compiled, never run. */
function describe(conn: Connection, sql: string): HranaDescribeResult {
  try {
    const { columns, writes } = conn.describe(sql);
    const params = scanParams(sql);
    return {
      params: Array.from({ length: params.count }, (_, i) => ({ name: params.names.get(i + 1) ?? null })),
      cols: columns.names.map((name, i) => ({ name, decltype: columns.types[i] ?? null })),
      is_explain: /^explain\b/i.test(sql.slice(leadingSkip(sql))),
      is_readonly: !writes,
    };
  } catch (err) {
    throw explain(conn, err);
  }
}

/** Where the first token of `sql` starts (after whitespace and comments). */
function leadingSkip(sql: string): number {
  let i = 0;
  for (;;) {
    while (i < sql.length && /\s/.test(sql[i] as string)) i++;
    const c = sql[i];
    if ((c !== '-' && c !== '/') || skippedEnd(sql, i) === i) return i;
    i = skippedEnd(sql, i);
  }
}

const readOnly = new WeakSet<Connection>();

/** BEGIN DEFERRED plus query_only, so any write in it fails with SQLITE_READONLY. */
function beginReadOnly(conn: Connection): HranaStmtResult {
  runEncoded(conn, { sql: 'BEGIN DEFERRED' }, HRANA_ENCODING);
  conn.engineExec('PRAGMA query_only=ON');
  readOnly.add(conn);
  return {
    cols: [],
    rows: [],
    affected_row_count: 0,
    last_insert_rowid: null,
    rows_read: 0,
    rows_written: 0,
    query_duration_ms: 0,
  };
}

function endReadOnly(conn: Connection): void {
  if (!readOnly.delete(conn)) return;
  conn.engineExec('PRAGMA query_only=OFF');
}

/** Hrana batch: each step runs when its condition holds; a failed step is reported, the batch goes on. */
function batch(
  conn: Connection,
  steps: { condition?: HranaCond | null; stmt: HranaStmt }[],
  totals: HranaResult,
): { step_results: (HranaStmtResult | null)[]; step_errors: (HranaError | null)[] } {
  const results: (HranaStmtResult | null)[] = [];
  const errors: (HranaError | null)[] = [];
  const holds = (c: HranaCond): boolean => {
    switch (c.type) {
      case 'ok':
        return results[c.step] != null;
      case 'error':
        return errors[c.step] != null;
      case 'not':
        return !holds(c.cond);
      case 'and':
        return c.conds.every(holds);
      case 'or':
        return c.conds.some(holds);
      case 'is_autocommit':
        return !conn.inTransaction;
    }
  };
  for (const step of steps) {
    let result: HranaStmtResult | null = null;
    let error: HranaError | null = null;
    if (!step.condition || holds(step.condition)) {
      try {
        result = execute(conn, step.stmt, totals);
      } catch (err) {
        // A time limit or a crash ends the executor, so whatever is caught here is this step's own.
        error = toHranaError(conn, err);
      }
    }
    results.push(result);
    errors.push(error);
  }
  return { step_results: results, step_errors: errors };
}

function toHranaError(conn: Connection, err: unknown): HranaError {
  const e = err instanceof DatabaseEngineError ? err : explain(conn, err);
  const primary = primaryCodeName(e.code);
  if (primary === undefined) return { message: e.message, code: e.code };
  return primary === e.code
    ? { message: e.message, code: primary }
    : { message: e.message, code: primary, extended_code: e.code };
}
