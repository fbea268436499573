// A dataset's row shape: a JSON Schema (`type: object`, `properties`), given at creation or inferred
// from the first rows, and what it becomes in the dataset's database: the view `items`, one column
// per property (`json_extract` of the row), beside the table `rows` that holds each row whole.
import Database from 'better-sqlite3';

export type JsonType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array' | 'null';

export interface RowSchema {
  type: 'object';
  properties: Record<string, { type?: JsonType | JsonType[]; description?: string }>;
  required?: string[];
}

/** Columns a dataset's view carries (SQLite allows 2000; a row this wide is not a table). */
export const MAX_PROPERTIES = 200;

export const ROWS_DDL = [
  'CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, data TEXT NOT NULL, url TEXT, job_id TEXT, added_at INTEGER NOT NULL)',
  'CREATE VIEW IF NOT EXISTS items AS SELECT id AS _row, added_at AS _added_at FROM rows',
];

function typeOf(v: unknown): JsonType {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v as JsonType;
}

/** The schema the first rows suggest: every top-level key, with the types seen. */
export function inferSchema(rows: Record<string, unknown>[]): RowSchema {
  const props = new Map<string, Set<JsonType>>();
  for (const r of rows) {
    for (const [k, v] of Object.entries(r)) {
      if (!props.has(k) && props.size >= MAX_PROPERTIES) continue;
      const t = props.get(k) ?? new Set<JsonType>();
      t.add(typeOf(v));
      props.set(k, t);
    }
  }
  const properties: RowSchema['properties'] = {};
  for (const [k, types] of props) {
    // An integer seen beside a fraction is a number.
    if (types.has('number')) types.delete('integer');
    const list = [...types];
    properties[k] = { type: list.length === 1 ? list[0]! : list };
  }
  return { type: 'object', properties };
}

/** Why a row does not fit a given schema, or null: required keys and the declared top-level types. */
export function mismatch(schema: RowSchema, row: Record<string, unknown>): string | null {
  for (const k of schema.required ?? [])
    if (!(k in row)) return `missing required property ${JSON.stringify(k)}`;
  for (const [k, v] of Object.entries(row)) {
    const want = schema.properties[k]?.type;
    if (want === undefined) continue;
    const got = typeOf(v);
    const ok = (Array.isArray(want) ? want : [want]).some(
      (w) => w === got || (w === 'number' && got === 'integer'),
    );
    if (!ok)
      return `property ${JSON.stringify(k)} is ${got}, the schema says ${Array.isArray(want) ? want.join(' or ') : want}`;
  }
  return null;
}

const ident = (s: string) => `"${s.replace(/"/g, '""')}"`;
const pathOf = (k: string) => `'$."${k.replace(/'/g, "''").replace(/"/g, '\\"')}"'`;

/** The view `items` for a schema: the row's number and time (`_row`, `_added_at`), then one column per property. */
export function itemsView(schema: RowSchema | null): string[] {
  const reserved = new Set(['_row', '_added_at']);
  const cols = Object.keys(schema?.properties ?? {})
    .filter((k) => !reserved.has(k))
    .map((k) => `json_extract(data, ${pathOf(k)}) AS ${ident(k)}`);
  return [
    'DROP VIEW IF EXISTS items',
    `CREATE VIEW items AS SELECT id AS _row, added_at AS _added_at${cols.map((c) => `, ${c}`).join('')} FROM rows`,
  ];
}

/**
 * Whether `sql` is one statement that only reads, judged by SQLite itself: prepared against an empty
 * database of the same shape, `readonly` is SQLite's own answer (sqlite3_stmt_readonly). Null when it
 * is; else why not, in words.
 */
export function readOnlyProblem(sql: string, schema: RowSchema | null): string | null {
  const db = new Database(':memory:');
  try {
    db.exec(ROWS_DDL[0]!);
    for (const s of itemsView(schema)) db.exec(s);
    let stmt: Database.Statement;
    try {
      stmt = db.prepare(sql);
    } catch (e) {
      return (e as Error).message;
    }
    if (!stmt.readonly) return 'only statements that read are allowed on a dataset (SELECT, WITH ... SELECT)';
    if (!stmt.reader) return 'the statement returns no rows';
    return null;
  } finally {
    db.close();
  }
}
