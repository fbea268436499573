import { sqliteCodeName } from './sqlite-codes.js';

/**
 * Engine error codes that are not SQLite result codes. SQL errors carry SQLite's
 * extended code name instead (e.g. `SQLITE_CONSTRAINT_UNIQUE`).
 */
export const ENGINE_ERROR_CODES = [
  'QueryTimeout',
  'ResultTooLarge',
  'DatabaseTooLarge',
  'InvalidDatabaseId',
  'DatabaseNotFound',
  'DatabaseExists',
  'InvalidRequest',
  'EngineClosed',
  'EngineWorkerCrashed',
  'QueueFull',
  'QueueTimeout',
  'StreamLost',
] as const;
export type EngineErrorCode = (typeof ENGINE_ERROR_CODES)[number];

/**
 * The one error type the engine throws. `code` is either an `EngineErrorCode` or an
 * SQLite extended result code name; `message` is SQLite's own message for SQL errors.
 * `statementIndex` says which statement of a batch failed. The service maps
 * SQLITE_* and most engine codes to 400, DatabaseNotFound to 404.
 */
export class DatabaseEngineError extends Error {
  readonly code: string;
  readonly statementIndex?: number;
  constructor(code: string, message: string, statementIndex?: number) {
    super(message);
    this.name = 'DatabaseEngineError';
    this.code = code;
    if (statementIndex !== undefined) this.statementIndex = statementIndex;
  }

  get isSqlError(): boolean {
    return this.code.startsWith('SQLITE_');
  }
}

/** What travels between executor process and pool (errors do not survive IPC as classes). */
export interface SerializedError {
  code: string;
  message: string;
  statementIndex?: number;
}

export function serializeError(err: unknown): SerializedError {
  if (err instanceof DatabaseEngineError) {
    return { code: err.code, message: err.message, statementIndex: err.statementIndex };
  }
  const e = err as { errcode?: unknown; message?: unknown };
  if (typeof e?.errcode === 'number') {
    return { code: sqliteCodeName(e.errcode), message: String(e.message) };
  }
  return { code: 'SQLITE_MISUSE', message: err instanceof Error ? err.message : String(err) };
}

export function deserializeError(e: SerializedError): DatabaseEngineError {
  return new DatabaseEngineError(e.code, e.message, e.statementIndex);
}
