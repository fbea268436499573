import type { SqlArgs } from './schemas.js';

/*
 * The libSQL Hrana work the engine runs for a stream (the HTTP adapter in ../hrana/ turns the wire
 * requests into these, with stored SQL resolved and argument values in nube's own encoding).
 * Results come back already in Hrana's wire shapes (typed values), so nothing is re-encoded.
 */

export interface HranaStmt {
  sql: string;
  args?: SqlArgs;
  wantRows: boolean;
}

export type HranaCond =
  | { type: 'ok' | 'error'; step: number }
  | { type: 'not'; cond: HranaCond }
  | { type: 'and' | 'or'; conds: HranaCond[] }
  | { type: 'is_autocommit' };

export type HranaStep =
  | { type: 'execute'; stmt: HranaStmt }
  | { type: 'batch'; steps: { condition?: HranaCond | null; stmt: HranaStmt }[] }
  | { type: 'sequence'; sql: string }
  | { type: 'describe'; sql: string }
  | { type: 'get_autocommit' };

/**
 * Hrana's Value. A float -0 travels as the string '-0' (JSON.stringify prints -0 as 0): the Hrana
 * server writes it as the JSON number -0 (hranaJson in ../hrana/wire.ts).
 */
export type HranaValue =
  | { type: 'null' }
  | { type: 'integer'; value: string }
  | { type: 'float'; value: number | '-0' }
  | { type: 'text'; value: string }
  | { type: 'blob'; base64: string };

/**
 * `code` is what libSQL's server sends: SQLite's primary result code name (SQLITE_CONSTRAINT), or
 * one of nube's engine codes; `extended_code` adds the extended name (SQLITE_CONSTRAINT_UNIQUE) when
 * SQLite gave one (clients ignore fields they do not know).
 */
export interface HranaError {
  message: string;
  code: string;
  extended_code?: string;
}

export interface HranaStmtResult {
  cols: { name: string; decltype: string | null }[];
  rows: HranaValue[][];
  affected_row_count: number;
  last_insert_rowid: string | null;
  rows_read: number;
  rows_written: number;
  query_duration_ms: number;
}

export type HranaStepResponse =
  | { type: 'execute'; result: HranaStmtResult }
  | {
      type: 'batch';
      result: { step_results: (HranaStmtResult | null)[]; step_errors: (HranaError | null)[] };
    }
  | { type: 'sequence' }
  | { type: 'describe'; result: HranaDescribeResult }
  | { type: 'get_autocommit'; is_autocommit: boolean };

/** Hrana's DescribeResult: parameters (by name, null for `?`), result columns, what the statement is. */
export interface HranaDescribeResult {
  params: { name: string | null }[];
  cols: { name: string; decltype: string | null }[];
  is_explain: boolean;
  is_readonly: boolean;
}

export type HranaStepOutcome = { ok: true; response: HranaStepResponse } | { ok: false; error: HranaError };

export interface HranaRequest {
  steps: HranaStep[];
  /**
   * A stream that outlives this request (it has a baton): it gets a connection of its own, kept on
   * one executor until `closeStream`. Without it the steps run on the database's shared connection
   * and anything they leave open (a transaction, foreign_keys off) is undone at the end.
   */
  stream?: string;
  /** The stream ran before: its connection must still be there (else StreamLost, never a fresh one). */
  resume?: boolean;
}

export interface HranaResult {
  outcomes: HranaStepOutcome[];
  rowsRead: number;
  rowsWritten: number;
}
