import { z } from 'zod';
import type { HranaCond } from '../engine/index.js';
import { MAX_SQL_LENGTH } from '../engine/index.js';

// libSQL's Hrana over HTTP, JSON encoding (HRANA_2_SPEC.md / HRANA_3_SPEC.md in tursodatabase/libsql):
// the request bodies this server accepts. Anything else is a 400 with `issues`.

const sql = z.string().min(1).max(MAX_SQL_LENGTH);
const sqlId = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31 - 1);

export const hranaValueSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('null') }),
  z.object({ type: z.literal('integer'), value: z.string().regex(/^-?\d{1,20}$/, 'decimal integer') }),
  z.object({ type: z.literal('float'), value: z.number() }),
  z.object({ type: z.literal('text'), value: z.string() }),
  // Standard base64; libSQL clients may leave the padding off.
  z.object({
    type: z.literal('blob'),
    base64: z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'standard base64'),
  }),
]);
export type HranaWireValue = z.infer<typeof hranaValueSchema>;

export const hranaStmtSchema = z.object({
  sql: sql.optional(),
  sql_id: sqlId.optional(),
  args: z.array(hranaValueSchema).max(32_766).optional(),
  named_args: z
    .array(z.object({ name: z.string().min(1).max(1000), value: hranaValueSchema }))
    .max(32_766)
    .optional(),
  want_rows: z.boolean().optional(),
});
export type HranaWireStmt = z.infer<typeof hranaStmtSchema>;

const MAX_COND_DEPTH = 16;

function condSchema(depth: number): z.ZodType<HranaCond> {
  const step = z.number().int().min(0).max(10_000);
  const leaf = [
    z.object({ type: z.literal('ok'), step }),
    z.object({ type: z.literal('error'), step }),
    z.object({ type: z.literal('is_autocommit') }),
  ] as const;
  if (depth >= MAX_COND_DEPTH) return z.discriminatedUnion('type', [...leaf]) as z.ZodType<HranaCond>;
  const inner = z.lazy(() => condSchema(depth + 1));
  return z.discriminatedUnion('type', [
    ...leaf,
    z.object({ type: z.literal('not'), cond: inner }),
    z.object({ type: z.literal('and'), conds: z.array(inner).max(1000) }),
    z.object({ type: z.literal('or'), conds: z.array(inner).max(1000) }),
  ]) as z.ZodType<HranaCond>;
}

export const hranaBatchSchema = z.object({
  steps: z.array(z.object({ condition: condSchema(0).nullish(), stmt: hranaStmtSchema })).max(10_000),
});

const sqlRef = { sql: sql.optional(), sql_id: sqlId.optional() };

export const streamRequestSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('close') }),
  z.object({ type: z.literal('execute'), stmt: hranaStmtSchema }),
  z.object({ type: z.literal('batch'), batch: hranaBatchSchema }),
  z.object({ type: z.literal('sequence'), ...sqlRef }),
  z.object({ type: z.literal('describe'), ...sqlRef }),
  z.object({ type: z.literal('store_sql'), sql_id: sqlId, sql }),
  z.object({ type: z.literal('close_sql'), sql_id: sqlId }),
  z.object({ type: z.literal('get_autocommit') }),
]);
export type StreamRequest = z.infer<typeof streamRequestSchema>;

export const pipelineBodySchema = z.object({
  baton: z.string().max(200).nullish(),
  requests: z.array(streamRequestSchema).max(1000),
});
export type PipelineBody = z.infer<typeof pipelineBodySchema>;

// Hrana over WebSocket (JSON): the client's messages.
const streamId = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31 - 1);
const cursorId = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31 - 1);

export const wsRequestSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('open_stream'), stream_id: streamId }),
  z.object({ type: z.literal('close_stream'), stream_id: streamId }),
  z.object({ type: z.literal('execute'), stream_id: streamId, stmt: hranaStmtSchema }),
  z.object({ type: z.literal('batch'), stream_id: streamId, batch: hranaBatchSchema }),
  z.object({ type: z.literal('sequence'), stream_id: streamId, ...sqlRef }),
  z.object({ type: z.literal('describe'), stream_id: streamId, ...sqlRef }),
  z.object({ type: z.literal('get_autocommit'), stream_id: streamId }),
  z.object({ type: z.literal('store_sql'), sql_id: sqlId, sql }),
  z.object({ type: z.literal('close_sql'), sql_id: sqlId }),
  z.object({
    type: z.literal('open_cursor'),
    stream_id: streamId,
    cursor_id: cursorId,
    batch: hranaBatchSchema,
  }),
  z.object({ type: z.literal('close_cursor'), cursor_id: cursorId }),
  z.object({
    type: z.literal('fetch_cursor'),
    cursor_id: cursorId,
    max_count: z.number().int().min(0).max(1_000_000),
  }),
]);
export type WsRequest = z.infer<typeof wsRequestSchema>;

export const wsClientMsgSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('hello'), jwt: z.string().max(16_384).nullish() }),
  z.object({
    type: z.literal('request'),
    request_id: z
      .number()
      .int()
      .min(0)
      .max(2 ** 31 - 1),
    request: wsRequestSchema,
  }),
]);

/** Hrana 3 `POST /v3/cursor`: a batch whose results come back as a stream of entries. */
export const cursorBodySchema = z.object({
  baton: z.string().max(200).nullish(),
  batch: hranaBatchSchema,
});

const NEG_ZERO_WIRE = '{"type":"float","value":"-0"}';

/**
 * A Hrana response as JSON text, float -0 included (the engine hands it over as '-0', see
 * HranaValue). Quotes inside strings are escaped, so only a float value can match NEG_ZERO_WIRE.
 */
export function hranaJson(body: unknown): string {
  const text = JSON.stringify(body);
  return text.includes(NEG_ZERO_WIRE) ? text.replaceAll(NEG_ZERO_WIRE, '{"type":"float","value":-0}') : text;
}
