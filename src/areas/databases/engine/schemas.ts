import { z } from 'zod';
import { limited } from '../../../platform/json-limits.js';

/*
 * Wire encoding of SQLite values ("Databases: QueryResult encoding" in docs/decisions.md).
 * Plain JSON wherever JSON is exact, a one-key object where it is not:
 *   NULL                         -> null
 *   TEXT                         -> string
 *   INTEGER |v| <= 2^53-1        -> number
 *   INTEGER beyond that          -> { "integer": "<decimal>" }   (never rounded)
 *   REAL (finite)                -> number (shortest round-trip form, so bit-exact)
 *   REAL +/-Infinity, -0         -> { "real": "Infinity" | "-Infinity" | "-0" }
 *   BLOB                         -> { "base64": "<standard base64>" }
 * Arguments use the same encoding; in addition a number with a fraction binds as REAL,
 * an integral number as INTEGER, `{ "real": 1 }` forces REAL (bit for bit, exact-reals.ts),
 * booleans bind as 1/0.
 * An integral REAL (e.g. 2.0) reads back as the JSON number 2: JSON cannot tell 2 from 2.0;
 * the value is exact, the storage class is what `typeof(x)` in SQL returns.
 */
export const bigIntegerValueSchema = z.strictObject({
  integer: z.string().regex(/^-?\d{1,20}$/, 'decimal integer'),
});
export const specialRealValueSchema = z.strictObject({
  real: z.union([z.enum(['Infinity', '-Infinity', '-0']), z.number()]),
});
export const blobValueSchema = z.strictObject({
  base64: z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'standard base64'),
});

/** A value as it appears in QueryResult rows. */
export const sqlValueSchema = z.union([
  z.null(),
  z.number(),
  z.string(),
  bigIntegerValueSchema,
  specialRealValueSchema,
  blobValueSchema,
]);
export type SqlValue = z.infer<typeof sqlValueSchema>;

/** A bound argument: any row value, plus booleans. */
export const sqlArgSchema = z.union([sqlValueSchema, z.boolean()]);
export type SqlArg = z.infer<typeof sqlArgSchema>;

/** Positional (`?`, `?NNN`) or named (`:name`, `@name`, `$name`; key with or without the prefix). */
export const sqlArgsSchema = z.union([
  z.array(sqlArgSchema).max(32_766),
  // Values are scalars or one-key objects; the body limit bounds the size (blobs may be large).
  limited(z.record(z.string(), sqlArgSchema), { maxDepth: 2, maxKeys: 32_766 }),
]);
export type SqlArgs = z.infer<typeof sqlArgsSchema>;

export const MAX_SQL_LENGTH = 1_000_000;
export const MAX_BATCH_STATEMENTS = 20;
export const MAX_IMPORT_ROWS = 10_000;

export const queryRequestSchema = z.strictObject({
  sql: z.string().min(1).max(MAX_SQL_LENGTH),
  args: sqlArgsSchema.optional(),
});
export type QueryRequest = z.infer<typeof queryRequestSchema>;

export const batchRequestSchema = z.strictObject({
  statements: z.array(queryRequestSchema).min(1).max(MAX_BATCH_STATEMENTS),
});
export type BatchRequest = z.infer<typeof batchRequestSchema>;

export const importRequestSchema = z.strictObject({
  table: z.string().min(1).max(256),
  columns: z.array(z.string().min(1).max(256)).min(1).max(2000),
  rows: z.array(z.array(sqlArgSchema)).max(MAX_IMPORT_ROWS),
  onConflict: z.enum(['abort', 'ignore', 'replace']).optional(),
});
export type ImportRequest = z.infer<typeof importRequestSchema>;

/** The `POST /databases/{dbId}/query` body: exactly one of the three shapes (objects are strict). */
export const databaseQueryBodySchema = z.union([queryRequestSchema, batchRequestSchema, importRequestSchema]);

export const queryResultSchema = z.object({
  /** Result column names (`sqlite3_column_name`); empty for statements without a result set. */
  columns: z.array(z.string()),
  /** Declared column types (`sqlite3_column_decltype`), null for expressions. */
  columnTypes: z.array(z.string().nullable()),
  rows: z.array(z.array(sqlValueSchema)),
  /** Rows inserted, updated or deleted by this statement (`sqlite3_changes`, without triggers). */
  rowsAffected: z.number().int(),
  /** Rowid of the last inserted row when the statement changed rows, else null; a decimal string. */
  lastInsertRowid: z.string().nullable(),
  /** Rows returned to the client (the binding does not expose SQLite's scan counters). */
  rowsRead: z.number().int(),
  /** Rows changed including trigger and foreign-key actions (`total_changes()` delta). */
  rowsWritten: z.number().int(),
  durationMs: z.number(),
});
export type QueryResult = z.infer<typeof queryResultSchema>;

export const batchResultSchema = z.object({ results: z.array(queryResultSchema) });
export type BatchResult = z.infer<typeof batchResultSchema>;

export const importResultSchema = z.object({ imported: z.number().int(), total: z.number().int() });
export type ImportResult = z.infer<typeof importResultSchema>;
