import { createReadStream } from 'node:fs';
import { z } from 'zod';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { IsoTime, Ok, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import {
  batchResultSchema,
  databaseQueryBodySchema,
  importResultSchema,
  queryResultSchema,
} from './engine/index.js';
import type { DatabasesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    databases: DatabasesService;
  }
}

const tags = ['Databases'];

const DbId = z.object({ dbId: z.string().min(1).max(200).describe('Database id') });

export const Database = z
  .object({
    id: z.string().describe('Database id (`dbId` in paths)'),
    name: z.string(),
    description: z.string().nullable(),
    sizeBytes: z
      .number()
      .int()
      .describe('Bytes on disk (database file plus its WAL); counts against plan storage'),
    rowsRead: z.number().int().describe('Rows returned by queries on this database, all time'),
    rowsWritten: z
      .number()
      .int()
      .describe('Rows inserted, updated or deleted (with trigger actions), all time'),
    createdAt: IsoTime,
    libsqlUrl: z
      .string()
      .describe(
        'URL for libSQL clients (`createClient({ url: libsqlUrl, authToken })` from @libsql/client): ' +
          'Hrana over HTTP; authToken is a nube key or a database token',
      ),
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'Database', description: 'An isolated SQLite database' });

const DatabaseToken = z
  .object({
    id: z.string().describe('Token id (for revoking)'),
    databaseId: z.string(),
    name: z.string().nullable(),
    preview: z.string().describe('The first characters of the token'),
    createdAt: IsoTime,
  })
  .meta({ id: 'DatabaseToken', description: 'A credential for SQL on one database' });

const DatabaseBookmark = z
  .object({
    id: z.string().describe('Bookmark id (bkm_...)'),
    databaseId: z.string(),
    name: z.string().nullable(),
    at: IsoTime.describe('The point it names: every write acknowledged before it is included'),
    createdAt: IsoTime,
  })
  .meta({ id: 'DatabaseBookmark', description: "A named point in a database's history" });

const VALUE_ENCODING =
  'Values: NULL -> null, TEXT -> string, INTEGER within +/-(2^53-1) -> number, larger INTEGER -> ' +
  '`{ "integer": "<decimal>" }`, REAL -> number (`{ "real": "Infinity" }` for infinities, `{ "real": "-0" }` ' +
  'for -0), BLOB -> `{ "base64": "..." }`. Arguments use the same encoding plus booleans (1/0); `{ "real": 3 }` ' +
  'forces REAL, stored bit for bit.';

const QueryResult = queryResultSchema.meta({
  id: 'QueryResult',
  description:
    'Result of one SQL statement (after Cloudflare D1 meta and libSQL Hrana StmtResult): columns, ' +
    'declared columnTypes (null for expressions), rows as arrays aligned with columns, rowsAffected, ' +
    'lastInsertRowid (decimal string, or null when nothing was written), rowsRead, rowsWritten, durationMs. ' +
    VALUE_ENCODING,
});

const QueryBody = databaseQueryBodySchema.describe(
  'Exactly one of: `{ sql, args? }` (args: array for `?`/`?NNN`, object for `:name`/`@name`/`$name`); ' +
    '`{ statements: [{ sql, args? }] }` (1-20, one transaction, all or nothing); ' +
    '`{ table, columns, rows, onConflict? }` (up to 10,000 rows, one transaction; onConflict abort ' +
    '(default), ignore or replace). ' +
    VALUE_ENCODING,
);

export const databasesOperations = [
  defineOperation({
    id: 'databases.list',
    method: 'GET',
    path: '/databases',
    summary: 'List your SQLite databases',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ items: z.array(Database) }),
    handler: ({ services, principal, query }) => services.databases.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'databases.create',
    method: 'POST',
    path: '/databases',
    summary: 'Create an isolated SQLite database',
    description:
      'Plans allow 3 (Byte), 10 (Mega) or 20 (Tera) databases. Names are unique per account. With `from`, a branch ' +
      "of another of your databases as it was at a time of its history (default now), copied from its snapshot and WAL segments.",
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
      workspaceId: WorkspaceIdInput.optional(),
      from: z
        .object({
          databaseId: z.string().min(1).max(200).describe('The database to branch from (yours)'),
          at: IsoTime.optional().describe("A time within its history window (default: now)"),
        })
        .optional()
        .describe("A branch: the new database starts as that one was at `at`, built from its history, and is independent afterwards"),
    }),
    successStatus: 201,
    response: Database,
    errors: [
      { status: 400, code: 'RestorePointOutsideWindow', description: "A branch's `at` is outside the source's history window" },
      { status: 402, code: 'PlanLimitReached', description: "A branch past the plan's database allowance" },
      { status: 403, code: 'PlanLimitReached', description: "The plan's database allowance is used up" },
      { status: 409, code: 'DatabaseNameTaken', description: 'A database with this name exists' },
    ],
    handler: ({ services, principal, body }) => services.databases.create(principal, body),
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
    handler: ({ services, principal, params }) => services.databases.get(principal, params.dbId),
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
    handler: ({ services, principal, params }) => services.databases.delete(principal, params.dbId),
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
      "rows) -> `{ imported, total }`. SQL errors answer 400 with SQLite's message and extended result code " +
      'as `code` (e.g. SQLITE_CONSTRAINT_UNIQUE) and `statementIndex` for a batch. ATTACH, VACUUM INTO, ' +
      'load_extension and PRAGMAs that change files or safety are refused (SQLITE_AUTH). Each request has a ' +
      'time limit (QueryTimeout) and a result cap (ResultTooLarge). Several statements in one `sql` run in ' +
      "one transaction and return the last one's result. Executors are shared fairly between accounts: an " +
      "account's requests beyond its share wait in its own queue, a full queue answers 429 DatabaseQueueFull, and a request that waited too long 503 DatabaseBusy.",
    tags,
    auth: ['owner', 'database'],
    params: DbId,
    // SQL, its arguments and imported rows go to the user's own SQLite database, which stores any text.
    anyText: true,
    body: QueryBody,
    response: z.union([
      QueryResult,
      batchResultSchema.extend({
        results: z.array(QueryResult).describe('One result per statement, in order'),
      }),
      importResultSchema.extend({
        imported: z.number().int().describe('Rows written (skipped conflicts not counted)'),
        total: z.number().int().describe('Rows in the request'),
      }),
    ]),
    // SQL is a hot path (agents issue many small queries); the executor pool bounds the real cost.
    rateLimit: { points: 600_000, windowSeconds: 60 },
    errors: [
      { status: 400, code: 'SQLITE_*', description: "The SQL failed: SQLite's message and extended code" },
      {
        status: 400,
        code: 'QueryTimeout',
        description: 'The request ran past its time limit; nothing was kept',
      },
      {
        status: 400,
        code: 'ResultTooLarge',
        description: 'The result passed the row or byte cap; add LIMIT',
      },
      {
        status: 402,
        code: 'StorageQuotaExceeded',
        description: "A write needs more than the plan's storage",
      },
      { status: 403, code: 'DatabaseTooLarge', description: 'A write would pass the per-database size cap' },
      {
        status: 429,
        code: 'DatabaseQueueFull',
        description:
          "The account's share of the query executors is busy and its queue of waiting requests is full; retry after Retry-After",
      },
      {
        status: 503,
        code: 'DatabaseBusy',
        description:
          "The request waited its allowance for an executor (the account's earlier requests held its share) and never ran",
      },
    ],
    handler: ({ services, principal, params, body }) =>
      services.databases.query(principal, params.dbId, body),
  }),
  defineOperation({
    id: 'databases.tokens.create',
    method: 'POST',
    path: '/databases/{dbId}/tokens',
    summary: 'Create a database token: SQL on this database only (libSQL authToken, or Bearer for /query)',
    description:
      'The token (`nube_db_...`) is shown once; only its hash is stored. It runs SQL on this one database ' +
      '(POST /databases/{dbId}/query and libSQL Hrana at `libsqlUrl`) and nothing else. Revoke it with DELETE. ' +
      'At most 50 per database.',
    tags,
    auth: ['owner'],
    params: DbId,
    body: z.object({
      name: z.string().min(1).max(100).optional().describe('A label for you (which app holds it)'),
    }),
    bodyOptional: true,
    successStatus: 201,
    response: DatabaseToken.extend({ token: z.string().describe('The secret, shown only in this response') }),
    errors: [{ status: 403, code: 'PlanLimitReached', description: 'The database has 50 tokens already' }],
    handler: ({ services, principal, params, body }) =>
      services.databases.createToken(principal, params.dbId, body.name),
  }),
  defineOperation({
    id: 'databases.tokens.list',
    method: 'GET',
    path: '/databases/{dbId}/tokens',
    summary: "List a database's tokens (previews, never the secrets)",
    tags,
    auth: ['owner'],
    params: DbId,
    response: z.object({ items: z.array(DatabaseToken) }),
    handler: ({ services, principal, params }) => services.databases.listTokens(principal, params.dbId),
  }),
  defineOperation({
    id: 'databases.tokens.revoke',
    method: 'DELETE',
    path: '/databases/{dbId}/tokens/{tokenId}',
    summary: 'Revoke a database token (it stops working within seconds)',
    tags,
    auth: ['owner'],
    params: DbId.extend({ tokenId: z.string().min(1).max(200).describe('Token id (dbt_...)') }),
    response: Ok,
    handler: ({ services, principal, params }) =>
      services.databases.revokeToken(principal, params.dbId, params.tokenId),
  }),
  defineOperation({
    id: 'databases.restore',
    method: 'POST',
    path: '/databases/{dbId}/restore',
    summary: 'Put a database back as it was at a time (or a bookmark) within its history window',
    description:
      'The history keeps every write shipped (at most about a second apart) for the plan\'s window: 1 day (Byte), ' +
      '7 days (Mega), 30 days (Tera); GET /databases/{dbId}/bookmarks shows the window. The database is restored ' +
      'to the last point shipped at or before `at`. The restore is itself undoable: the state just before it is ' +
      'bookmarked (`undo`), and restoring to that bookmark puts it back. Requests on the database wait while the ' +
      'restored file is put in place.',
    tags,
    auth: ['owner'],
    params: DbId,
    body: z
      .object({
        at: IsoTime.optional().describe('The time to go back to (ISO 8601)'),
        bookmark: z.string().min(1).max(200).optional().describe('A bookmark id (bkm_...) instead of a time'),
      })
      .refine((b) => (b.at === undefined) !== (b.bookmark === undefined), { message: 'give exactly one of `at` and `bookmark`' }),
    response: z.object({
      restoredTo: IsoTime.describe('The point restored: when the last segment applied was shipped'),
      undo: DatabaseBookmark.describe('The state just before this restore; restore to it to undo'),
    }),
    errors: [
      { status: 400, code: 'RestorePointOutsideWindow', description: 'The time is before the oldest point kept (the message gives the window)' },
      { status: 400, code: 'RestorePointInFuture', description: 'The time is in the future' },
    ],
    handler: ({ services, principal, params, body }) => services.databases.restore(principal, params.dbId, body),
  }),
  defineOperation({
    id: 'databases.bookmarks.list',
    method: 'GET',
    path: '/databases/{dbId}/bookmarks',
    summary: "List a database's bookmarks and the window its history covers",
    tags,
    auth: ['owner'],
    params: DbId,
    response: z.object({
      items: z.array(DatabaseBookmark),
      window: z.object({ from: IsoTime, to: IsoTime }).describe('The times a restore may name'),
    }),
    handler: ({ services, principal, params }) => services.databases.listBookmarks(principal, params.dbId),
  }),
  defineOperation({
    id: 'databases.bookmarks.create',
    method: 'POST',
    path: '/databases/{dbId}/bookmarks',
    summary: 'Name this moment of a database (before a risky migration) to restore to it later',
    tags,
    auth: ['owner'],
    params: DbId,
    body: z.object({ name: z.string().min(1).max(200).optional().describe('A label for you') }),
    bodyOptional: true,
    successStatus: 201,
    response: DatabaseBookmark,
    handler: ({ services, principal, params, body }) => services.databases.createBookmark(principal, params.dbId, body.name),
  }),
  defineOperation({
    id: 'databases.export',
    method: 'GET',
    path: '/databases/{dbId}/export',
    summary: 'Download the database as a SQLite file (a consistent snapshot, taken while writes go on)',
    tags,
    auth: ['owner'],
    params: DbId,
    produces: 'application/vnd.sqlite3',
    response: z.string().describe('The SQLite database file'),
    async handler({ services, principal, params }) {
      const { name, snapshot } = await services.databases.export(principal, params.dbId);
      const stream = createReadStream(snapshot.path);
      // The snapshot file is ours until the download ends, however it ends.
      stream.once('close', () => void snapshot.dispose());
      return new RawResponse(stream, 'application/vnd.sqlite3', {
        'content-length': String(snapshot.sizeBytes),
        'content-disposition': `attachment; filename="${name}.sqlite"`,
      });
    },
  }),
];
