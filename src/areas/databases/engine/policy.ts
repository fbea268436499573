import type { DatabaseSyncInstance } from '@photostructure/sqlite';

// Hostile-SQL policy, enforced inside SQLite on every user connection:
//  - an authorizer (called by SQLite while compiling each statement, including
//    statements inside triggers and views) refuses ATTACH/DETACH, load_extension,
//    user transaction control, unknown virtual table modules and every PRAGMA not on
//    the read-only allowlist; VACUUM INTO compiles to an ATTACH, so it is refused too;
//  - sqlite3_limit(SQLITE_LIMIT_ATTACHED, 0) as a second wall against ATTACH;
//  - SQLITE_DBCONFIG_DEFENSIVE (no writable_schema, no sqlite_dbpage writes, ...);
//  - extension loading never enabled; trusted_schema=OFF;
//  - max_page_count set by the engine (main and temp) caps the file size.
// Nothing here looks at SQL text.

const DENY = 1;
const OK = 0;

// Action codes from sqlite3.h.
const A = {
  CREATE_TEMP_INDEX: 3,
  CREATE_TEMP_TABLE: 4,
  CREATE_TEMP_TRIGGER: 5,
  CREATE_TEMP_VIEW: 6,
  PRAGMA: 19,
  TRANSACTION: 22,
  ATTACH: 24,
  DETACH: 25,
  CREATE_VTABLE: 29,
  FUNCTION: 31,
  SAVEPOINT: 32,
} as const;

/** Pragmas that only read, allowed with or without an argument (the argument names a table/index). */
const READ_PRAGMAS = new Set([
  'table_info',
  'table_xinfo',
  'table_list',
  'index_list',
  'index_info',
  'index_xinfo',
  'foreign_key_list',
  'foreign_key_check',
  'integrity_check',
  'quick_check',
  'collation_list',
  'function_list',
  'module_list',
  'pragma_list',
  'compile_options',
  'page_count',
  'freelist_count',
  'data_version',
]);
/** Pragmas allowed only as a read (no argument). */
const READ_ONLY_STATE_PRAGMAS = new Set([
  'page_size',
  'encoding',
  'schema_version',
  'foreign_keys',
  'journal_mode',
]);
/** Pragmas a user may also set: header fields for migration tools, and ANALYZE-like optimize. */
const WRITABLE_PRAGMAS = new Set(['user_version', 'application_id', 'optimize']);

const VTABLE_MODULES = new Set(['fts3', 'fts4', 'fts5', 'rtree', 'rtree_i32', 'geopoly']);
const DENIED_FUNCTIONS = new Set(['load_extension', 'fts3_tokenizer']);

/** Per-connection policy state the executor reads around each request. */
export interface PolicyState {
  /** True while the engine itself compiles a statement (BEGIN/COMMIT, size checks). */
  trusted: boolean;
  /** Set when a temp object was created: the connection is dropped after the request. */
  tempTouched: boolean;
  /** Why the last statement was refused, appended to SQLite's "not authorized". */
  lastDenied: string | null;
  /**
   * A libSQL (Hrana) stream owns this connection for now: it may BEGIN/COMMIT/ROLLBACK and use
   * savepoints, and switch foreign_keys (libSQL's migrate() does). The executor ends whatever a
   * stream left open before the connection serves anything else (hrana-exec.ts).
   */
  hrana?: boolean;
  /** A stream switched foreign_keys: the executor turns it back on before others use the connection. */
  fkChanged?: boolean;
  /** Set while a statement is compiled for Hrana's `describe`: whether anything it would do writes. */
  describing?: { writes: boolean };
}

/** Actions that only read (sqlite3_stmt_readonly is true for them, transaction control included). */
const READ_ACTIONS = new Set([20, 21, 22, 31, 32, 33]);

export function installPolicy(db: DatabaseSyncInstance, state: PolicyState): void {
  db.setAuthorizer((action: number, p1: string | null, p2: string | null) => {
    if (state.trusted) return OK;
    if (state.describing && !READ_ACTIONS.has(action) && !(action === A.PRAGMA && p2 === null)) {
      state.describing.writes = true;
    }
    switch (action) {
      case A.ATTACH:
      case A.DETACH:
        return deny(state, 'ATTACH, DETACH and VACUUM INTO are not allowed');
      case A.TRANSACTION:
      case A.SAVEPOINT:
        if (state.hrana) return OK;
        return deny(state, 'transaction control is not allowed; send a batch instead');
      case A.FUNCTION:
        return p2 !== null && DENIED_FUNCTIONS.has(p2.toLowerCase())
          ? deny(state, `function ${p2} is not allowed`)
          : OK;
      case A.CREATE_VTABLE:
        return p2 !== null && VTABLE_MODULES.has(p2.toLowerCase())
          ? OK
          : deny(state, `virtual table module ${p2} is not allowed`);
      case A.PRAGMA:
        if (state.hrana && p1?.toLowerCase() === 'foreign_keys' && p2 !== null) {
          state.fkChanged = true;
          return OK;
        }
        return pragmaAllowed(p1, p2) ? OK : deny(state, `PRAGMA ${p1} is not allowed`);
      case A.CREATE_TEMP_INDEX:
      case A.CREATE_TEMP_TABLE:
      case A.CREATE_TEMP_TRIGGER:
      case A.CREATE_TEMP_VIEW:
        state.tempTouched = true;
        return OK;
      default:
        return OK;
    }
  });
}

function pragmaAllowed(name: string | null, arg: string | null): boolean {
  if (name === null) return false;
  const n = name.toLowerCase();
  if (READ_PRAGMAS.has(n) || WRITABLE_PRAGMAS.has(n)) return true;
  return arg === null && READ_ONLY_STATE_PRAGMAS.has(n);
}

function deny(state: PolicyState, why: string): number {
  state.lastDenied = why;
  return DENY;
}
