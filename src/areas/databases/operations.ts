import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok } from '../../platform/schemas.js';

const tags = ['Databases'];

export const MAX_BATCH_STATEMENTS = 20;
export const MAX_IMPORT_ROWS = 10_000;

const DbId = z.object({ dbId: z.string().min(1).max(200).describe('Database id') });

/** A SQLite value as JSON: text, number, boolean (stored 0/1), null, or a blob as `{ base64 }`. */
const Value = z.union([
  z.string(),
  z.number(),
  z.boolean(),
  z.null(),
  z.object({ base64: z.string().describe('Blob bytes, base64') }),
]);

const Args = z
  .union([z.array(Value), z.record(z.string(), Value)])
  .describe('Bound parameters: an array for `?`/`?NNN`, or an object for `:name`/`@name`/`$name`');

const Statement = z.strictObject({
  sql: z.string().min(1).max(100_000).describe('One SQL statement'),
  args: Args.optional(),
});

const Identifier = z.string().min(1).max(128).describe('SQL identifier (table or column name)');

export const QueryBody = z.union([
  Statement.describe('A single statement'),
  z
    .strictObject({
      statements: z
        .array(Statement)
        .min(1)
        .max(MAX_BATCH_STATEMENTS)
        .describe('Statements run in order in one transaction (all or nothing), max 20'),
    })
    .describe('A batch'),
  z
    .strictObject({
      table: Identifier.describe('Existing table to import into'),
      columns: z.array(Identifier).min(1).max(2000).describe('Columns, in the order of each row'),
      rows: z
        .array(z.array(Value))
        .max(MAX_IMPORT_ROWS)
        .describe('Rows of values, one per column, up to 10,000'),
      onConflict: z
        .enum(['abort', 'ignore', 'replace'])
        .default('abort')
        .describe('On a constraint conflict: abort the whole import (default), skip the row, or replace it'),
    })
    .describe('A bulk import, in one transaction'),
]);

export const QueryResult = z
  .object({
    columns: z.array(z.string()).describe('Result column names, in order'),
    columnTypes: z
      .array(z.string().nullable())
      .describe('Declared type of each column, or null (expressions)'),
    rows: z
      .array(z.array(z.unknown()))
      .describe('Rows as arrays aligned with columns; blobs as `{ base64 }`'),
    rowsAffected: z.number().int().describe('Rows changed by INSERT/UPDATE/DELETE'),
    lastInsertRowid: z
      .string()
      .nullable()
      .describe('Rowid of the last inserted row as a decimal string (64-bit safe), or null'),
    rowsRead: z.number().int().describe('Rows scanned'),
    rowsWritten: z.number().int().describe('Rows written'),
    durationMs: z.number().describe('Execution time in milliseconds'),
  })
  .meta({
    id: 'QueryResult',
    description: 'Result of one SQL statement (after Cloudflare D1 / libSQL Hrana)',
  });

export const Database = z
  .object({
    id: z.string().describe('Database id (`dbId` in paths)'),
    name: z.string(),
    description: z.string().nullable(),
    sizeBytes: z.number().int().describe('Size of the database file'),
    tableCount: z.number().int().describe('Tables in the database'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
  })
  .meta({ id: 'Database', description: 'An isolated SQLite database' });

export const databasesOperations = [
  defineOperation({
    id: 'databases.list',
    method: 'GET',
    path: '/databases',
    summary: 'List your SQLite databases',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Database) }),
  }),
  defineOperation({
    id: 'databases.create',
    method: 'POST',
    path: '/databases',
    summary: 'Create an isolated SQLite database',
    description: 'Plans allow 3 (Byte), 10 (Mega) or 20 (Tera) databases. Names are unique per account.',
    tags,
    auth: ['owner'],
    body: z.object({
      name: z
        .string()
        .min(1)
        .max(64)
        .regex(/^[A-Za-z0-9-]+$/)
        .describe('Letters, digits and hyphens, max 64'),
      description: z.string().max(1000).optional(),
    }),
    successStatus: 201,
    response: Database,
    errors: [
      { status: 403, code: 'DatabaseLimitReached', description: "The plan's database allowance is used up" },
      { status: 409, code: 'DatabaseNameTaken', description: 'A database with this name exists' },
    ],
  }),
  defineOperation({
    id: 'databases.get',
    method: 'GET',
    path: '/databases/{dbId}',
    summary: 'Get a database',
    tags,
    auth: ['owner'],
    params: DbId,
    response: Database,
  }),
  defineOperation({
    id: 'databases.delete',
    method: 'DELETE',
    path: '/databases/{dbId}',
    summary: 'Delete a database and all its data (irreversible)',
    tags,
    auth: ['owner'],
    params: DbId,
    response: Ok,
  }),
  defineOperation({
    id: 'databases.query',
    method: 'POST',
    path: '/databases/{dbId}/query',
    summary:
      'Run SQL on a database: one statement, a batch of up to 20, or a bulk import of up to 10,000 rows',
    description:
      'Body is one of: `{ sql, args? }` -> QueryResult; `{ statements: [{sql, args?}] }` (max 20, one ' +
      'transaction) -> `{ results: QueryResult[] }`; `{ table, columns, rows, onConflict? }` (up to 10,000 ' +
      'rows) -> `{ imported, total }`. ATTACH and other statements reaching outside the database are refused.',
    tags,
    auth: ['owner'],
    params: DbId,
    body: QueryBody,
    response: z.union([
      QueryResult,
      z.object({ results: z.array(QueryResult).describe('One result per statement, in order') }),
      z.object({
        imported: z.number().int().describe('Rows written'),
        total: z.number().int().describe('Rows in the request'),
      }),
    ]),
    errors: [
      {
        status: 400,
        code: 'SqlError',
        description: 'The SQL failed (syntax, constraint, refused statement)',
      },
    ],
  }),
];
