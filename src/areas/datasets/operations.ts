import { z } from 'zod';
import { queryRequestSchema, queryResultSchema } from '../databases/engine/schemas.js';
import { limited } from '../../platform/json-limits.js';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { FreeObject, IsoTime, idParam, Ok, PageQuery } from '../../platform/schemas.js';
import { MAX_PROPERTIES } from './schema.js';
import type { DatasetsService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    datasets: DatasetsService;
  }
}

const tags = ['Datasets'];
const DatasetId = idParam('datasetId', 'Dataset id');

const JSON_TYPES = ['string', 'number', 'integer', 'boolean', 'object', 'array', 'null'] as const;
const JsonType = z.enum(JSON_TYPES);

const RowSchema = z
  .object({
    type: z.literal('object'),
    properties: limited(
      z.record(
        z.string().min(1).max(64),
        z
          .object({
            type: z.union([JsonType, z.array(JsonType).min(1).max(7)]).optional(),
            description: z.string().max(500).optional(),
          })
          .strict(),
      ),
      { maxDepth: 3, maxKeys: MAX_PROPERTIES, maxBytes: 256 * 1024 },
    ),
    required: z.array(z.string().max(64)).max(MAX_PROPERTIES).optional(),
  })
  .meta({
    id: 'DatasetSchema',
    description: "JSON Schema of a row: an object's top-level properties and their JSON types",
  });

const Dataset = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    schema: RowSchema.nullable().describe(
      'Given at creation, or inferred from the first rows appended; null while empty',
    ),
    schemaGiven: z
      .boolean()
      .describe('Rows are checked against a given schema (those that do not fit are rejected with why)'),
    databaseId: z
      .string()
      .describe(
        'The database holding the rows (table `rows`, view `items`); it also answers /databases/{id}/query and libSQL',
      ),
    rowCount: z.number().int(),
    createdAt: IsoTime,
    updatedAt: IsoTime,
  })
  .meta({ id: 'Dataset', description: 'Rows that web extractions and crawls append to' });

const DatasetRow = z
  .object({ id: z.number().int(), data: FreeObject, url: z.string().nullable(), addedAt: IsoTime })
  .meta({ id: 'DatasetRow' });

export const datasetsOperations = [
  defineOperation({
    id: 'datasets.create',
    method: 'POST',
    path: '/datasets',
    summary: 'Create a dataset for web extraction and crawl results',
    description:
      "Its rows live in a database of yours named `dataset-<name>` (it counts in your plan's databases). " +
      'Give `schema` to check rows against it; without one, the first rows appended give it (their keys and JSON types).',
    tags,
    auth: ['owner'],
    body: z
      .object({
        name: z
          .string()
          .min(1)
          .max(56)
          .regex(/^[A-Za-z0-9-]+$/, 'letters, digits and hyphens')
          .describe('Letters, digits and hyphens, max 56; unique per account'),
        description: z.string().max(1000).optional(),
        schema: RowSchema.optional(),
      })
      .strict(),
    successStatus: 201,
    response: Dataset,
    errors: [
      {
        status: 403,
        code: 'PlanLimitReached',
        description: "The plan's database allowance is used up (a dataset is a database)",
      },
      { status: 409, code: 'NameTaken', description: 'A dataset (or database) with this name exists' },
    ],
    handler: ({ principal, body, services }) => services.datasets.create(principal, body),
  }),
  defineOperation({
    id: 'datasets.list',
    method: 'GET',
    path: '/datasets',
    summary: 'List your datasets',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Dataset) }),
    handler: ({ principal, services }) => services.datasets.list(principal),
  }),
  defineOperation({
    id: 'datasets.get',
    method: 'GET',
    path: '/datasets/{datasetId}',
    summary: 'Get a dataset',
    tags,
    auth: ['owner'],
    params: DatasetId,
    response: Dataset,
    handler: ({ principal, params, services }) => services.datasets.get(principal, params.datasetId),
  }),
  defineOperation({
    id: 'datasets.delete',
    method: 'DELETE',
    path: '/datasets/{datasetId}',
    summary: 'Delete a dataset and its rows (its database goes too)',
    tags,
    auth: ['owner'],
    params: DatasetId,
    response: Ok,
    handler: ({ principal, params, services }) => services.datasets.delete(principal, params.datasetId),
  }),
  defineOperation({
    id: 'datasets.rows',
    method: 'GET',
    path: '/datasets/{datasetId}/rows',
    summary: "A dataset's rows, oldest first",
    description: 'Cursor pagination: pass `nextCursor` back as `cursor`.',
    tags,
    auth: ['owner'],
    params: DatasetId,
    query: PageQuery,
    response: z.object({
      items: z.array(DatasetRow),
      nextCursor: z.string().nullable().describe('Pass as `cursor` for the next page; null on the last page'),
      hasMore: z.boolean(),
    }),
    handler: ({ principal, params, query, services }) =>
      services.datasets.rows(principal, params.datasetId, query),
  }),
  defineOperation({
    id: 'datasets.export',
    method: 'GET',
    path: '/datasets/{datasetId}/export',
    summary: 'Every row of a dataset as CSV or NDJSON, streamed',
    description:
      'CSV: a header line, then `_row`, `_addedAt` and a column per schema property (objects and arrays as JSON; ' +
      "text that a spreadsheet would run as a formula starts with `'`). NDJSON: one JSON object per line, " +
      "the row's properties with `_row` and `_addedAt`.",
    tags,
    auth: ['owner'],
    params: DatasetId,
    query: z.object({
      format: z.enum(['csv', 'ndjson']).default('ndjson').describe('csv or ndjson (default)'),
    }),
    produces: 'application/x-ndjson, text/csv',
    response: z.string(),
    handler: async ({ principal, params, query, services }) => {
      const out = await services.datasets.export(principal, params.datasetId, query.format);
      const csv = query.format === 'csv';
      return new RawResponse(out.stream, csv ? 'text/csv; charset=utf-8' : 'application/x-ndjson', {
        'content-disposition': `attachment; filename="${out.name}.${csv ? 'csv' : 'ndjson'}"`,
      });
    },
  }),
  defineOperation({
    id: 'datasets.query',
    method: 'POST',
    path: '/datasets/{datasetId}/query',
    summary: 'Read a dataset with SQL (read-only): table `rows`, view `items`',
    description:
      '`rows(id, data, url, job_id, added_at)` holds each row as JSON; `items` has `_row`, `_added_at` and a ' +
      "column per schema property. One statement that only reads (SQLite decides); the databases' limits apply.",
    tags,
    auth: ['owner'],
    params: DatasetId,
    body: queryRequestSchema,
    anyText: ['sql', 'args'],
    response: queryResultSchema,
    errors: [{ status: 400, code: 'ReadOnly', description: 'Not one statement that reads' }],
    handler: ({ principal, params, body, services }) =>
      services.datasets.query(principal, params.datasetId, body),
  }),
];
