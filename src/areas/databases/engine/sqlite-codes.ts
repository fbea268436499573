// SQLite primary and extended result codes -> names (https://sqlite.org/rescode.html).
// The binding only exposes the primary name, so the engine maps the extended
// numeric code itself: clients get `SQLITE_CONSTRAINT_UNIQUE`, not `SQLITE_CONSTRAINT`.
const PRIMARY: Record<number, string> = {
  1: 'SQLITE_ERROR',
  2: 'SQLITE_INTERNAL',
  3: 'SQLITE_PERM',
  4: 'SQLITE_ABORT',
  5: 'SQLITE_BUSY',
  6: 'SQLITE_LOCKED',
  7: 'SQLITE_NOMEM',
  8: 'SQLITE_READONLY',
  9: 'SQLITE_INTERRUPT',
  10: 'SQLITE_IOERR',
  11: 'SQLITE_CORRUPT',
  12: 'SQLITE_NOTFOUND',
  13: 'SQLITE_FULL',
  14: 'SQLITE_CANTOPEN',
  15: 'SQLITE_PROTOCOL',
  16: 'SQLITE_EMPTY',
  17: 'SQLITE_SCHEMA',
  18: 'SQLITE_TOOBIG',
  19: 'SQLITE_CONSTRAINT',
  20: 'SQLITE_MISMATCH',
  21: 'SQLITE_MISUSE',
  22: 'SQLITE_NOLFS',
  23: 'SQLITE_AUTH',
  24: 'SQLITE_FORMAT',
  25: 'SQLITE_RANGE',
  26: 'SQLITE_NOTADB',
};

const EXTENDED: Record<number, string> = {
  257: 'SQLITE_ERROR_MISSING_COLLSEQ',
  513: 'SQLITE_ERROR_RETRY',
  769: 'SQLITE_ERROR_SNAPSHOT',
  261: 'SQLITE_BUSY_RECOVERY',
  517: 'SQLITE_BUSY_SNAPSHOT',
  773: 'SQLITE_BUSY_TIMEOUT',
  262: 'SQLITE_LOCKED_SHAREDCACHE',
  518: 'SQLITE_LOCKED_VTAB',
  264: 'SQLITE_READONLY_RECOVERY',
  520: 'SQLITE_READONLY_CANTLOCK',
  776: 'SQLITE_READONLY_ROLLBACK',
  1032: 'SQLITE_READONLY_DBMOVED',
  1288: 'SQLITE_READONLY_CANTINIT',
  1544: 'SQLITE_READONLY_DIRECTORY',
  267: 'SQLITE_CORRUPT_VTAB',
  523: 'SQLITE_CORRUPT_SEQUENCE',
  779: 'SQLITE_CORRUPT_INDEX',
  516: 'SQLITE_ABORT_ROLLBACK',
  275: 'SQLITE_CONSTRAINT_CHECK',
  531: 'SQLITE_CONSTRAINT_COMMITHOOK',
  787: 'SQLITE_CONSTRAINT_FOREIGNKEY',
  1043: 'SQLITE_CONSTRAINT_FUNCTION',
  1299: 'SQLITE_CONSTRAINT_NOTNULL',
  1555: 'SQLITE_CONSTRAINT_PRIMARYKEY',
  1811: 'SQLITE_CONSTRAINT_TRIGGER',
  2067: 'SQLITE_CONSTRAINT_UNIQUE',
  2323: 'SQLITE_CONSTRAINT_VTAB',
  2579: 'SQLITE_CONSTRAINT_ROWID',
  2835: 'SQLITE_CONSTRAINT_PINNED',
  3091: 'SQLITE_CONSTRAINT_DATATYPE',
  279: 'SQLITE_AUTH_USER',
};

/** Name of an (extended) SQLite result code; unknown extended codes fall back to their primary name. */
export function sqliteCodeName(code: number): string {
  return EXTENDED[code] ?? PRIMARY[code & 0xff] ?? `SQLITE_UNKNOWN_${code}`;
}

const PRIMARY_OF = new Map<string, string>([
  ...Object.values(PRIMARY).map((name) => [name, name] as [string, string]),
  ...Object.entries(EXTENDED).map(
    ([code, name]) => [name, PRIMARY[Number(code) & 0xff] as string] as [string, string],
  ),
]);

/** The primary result code name of an (extended) code name (SQLITE_CONSTRAINT_UNIQUE -> SQLITE_CONSTRAINT); undefined for names that are not SQLite's. */
export function primaryCodeName(name: string): string | undefined {
  return PRIMARY_OF.get(name);
}
