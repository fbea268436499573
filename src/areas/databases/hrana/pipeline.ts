import type { Principal } from '../../../platform/auth.js';
import type { HranaError, HranaStep, HranaStepResponse, HranaStmt, SqlArg } from '../engine/index.js';
import type { DatabasesService } from '../service.js';
import type { HranaStream, HranaStreams } from './streams.js';
import type { HranaWireStmt, HranaWireValue, PipelineBody, StreamRequest } from './wire.js';

type LocalResponse = { type: 'close' | 'store_sql' | 'close_sql' };
type StreamResult =
  | { type: 'ok'; response: HranaStepResponse | LocalResponse }
  | { type: 'error'; error: HranaError };
/** What one request of a pipeline came to. */
export type StreamOutcome = StreamResult;

export interface PipelineResponse {
  baton: string | null;
  base_url: null;
  results: StreamResult[];
}

/** A request that cannot run as sent (unknown sql_id, ...): that request's error, not the pipeline's. */
class StepRefused extends Error {
  constructor(
    message: string,
    readonly code = 'HRANA_PROTO_ERROR',
  ) {
    super(message);
  }
}

const MAX_STORED_SQL = 1000;

/**
 * One Hrana pipeline: the stream's requests in order. Stored SQL and argument values are resolved
 * here, every statement of the pipeline then runs in one executor request (one round trip), and
 * the results come back in order. A pipeline with no baton that ends with `close` (what
 * `execute`, `batch`, `executeMultiple` and `migrate` send) needs no stream of its own: it runs on
 * the database's shared connection like /query. Anything else opens or continues a stream.
 */
export async function runPipeline(
  databases: DatabasesService,
  streams: HranaStreams,
  p: Principal,
  dbId: string,
  body: PipelineBody,
): Promise<PipelineResponse> {
  const reqs = body.requests;
  let stream: HranaStream | null = body.baton ? streams.take(body.baton, p.ownerId, dbId) : null;
  const closeAt = reqs.findIndex((r) => r.type === 'close');
  const oneShot = stream === null && closeAt === reqs.length - 1;
  if (!oneShot && stream === null) {
    // Opening a stream on a database that is not the caller's must fail like any other request.
    await databases.assertAccess(p, dbId);
    stream = streams.open(p.ownerId, dbId);
  }
  const sqls = stream?.sqls ?? new Map<number, string>();
  const results: (StreamResult | null)[] = [];
  const steps: HranaStep[] = [];
  const stepAt: number[] = [];
  let closed = false;
  for (const req of reqs) {
    if (closed) {
      results.push(fail('the stream was closed by an earlier request of this pipeline', 'STREAM_CLOSED'));
      continue;
    }
    try {
      const step = translate(req, sqls);
      if (step === 'close') closed = true;
      if (typeof step === 'string') {
        results.push({ type: 'ok', response: { type: req.type as LocalResponse['type'] } });
        continue;
      }
      stepAt.push(results.length);
      results.push(null);
      steps.push(step);
    } catch (err) {
      if (!(err instanceof StepRefused)) throw err;
      results.push(fail(err.message, err.code));
    }
  }
  if (steps.length > 0) {
    try {
      const r = await databases.hrana(p, dbId, { steps, stream: stream?.id, resume: stream?.ran });
      r.outcomes.forEach((o, i) => {
        results[stepAt[i] as number] = o.ok
          ? { type: 'ok', response: o.response }
          : { type: 'error', error: o.error };
      });
    } catch (err) {
      // The stream's connection may be gone with its executor (time limit): the stream ends here.
      if (stream) await endStream(databases, streams, stream);
      throw err;
    } finally {
      if (stream) stream.ran = true;
    }
  }
  // Closing needs no answer before this one: the close goes onto the executor's channel now, ahead of
  // anything sent to it later, so the COMMIT's answer does not wait for another round trip.
  if (stream && closed) void endStream(databases, streams, stream).catch(() => undefined);
  const baton = stream && !closed ? streams.park(stream) : null;
  return { baton, base_url: null, results: results as StreamResult[] };
}

export async function endStream(
  databases: DatabasesService,
  streams: HranaStreams,
  s: HranaStream,
): Promise<void> {
  streams.drop(s);
  if (s.ran) await databases.closeStream(s.dbId, s.id);
}

function fail(message: string, code: string): StreamResult {
  return { type: 'error', error: { message, code } };
}

/** A wire request -> an engine step, or the name of a request answered here. */
function translate(req: StreamRequest, sqls: Map<number, string>): HranaStep | 'close' | 'local' {
  switch (req.type) {
    case 'close':
      return 'close';
    case 'store_sql':
      if (!sqls.has(req.sql_id) && sqls.size >= MAX_STORED_SQL) {
        throw new StepRefused(
          `a stream may store at most ${MAX_STORED_SQL} SQL texts`,
          'SQL_STORE_TOO_LARGE',
        );
      }
      sqls.set(req.sql_id, req.sql);
      return 'local';
    case 'close_sql':
      sqls.delete(req.sql_id);
      return 'local';
    case 'execute':
      return { type: 'execute', stmt: stmt(req.stmt, sqls) };
    case 'batch':
      return {
        type: 'batch',
        steps: req.batch.steps.map((s) => ({ condition: s.condition ?? null, stmt: stmt(s.stmt, sqls) })),
      };
    case 'sequence':
      return { type: 'sequence', sql: sqlOf(req, sqls) };
    case 'get_autocommit':
      return { type: 'get_autocommit' };
    case 'describe':
      return { type: 'describe', sql: sqlOf(req, sqls) };
  }
}

function sqlOf(ref: { sql?: string; sql_id?: number }, sqls: Map<number, string>): string {
  if (ref.sql !== undefined && ref.sql_id !== undefined)
    throw new StepRefused('give either sql or sql_id, not both');
  if (ref.sql !== undefined) return ref.sql;
  if (ref.sql_id === undefined) throw new StepRefused('a statement needs sql or sql_id');
  const text = sqls.get(ref.sql_id);
  if (text === undefined)
    throw new StepRefused(`no SQL text is stored as sql_id ${ref.sql_id}`, 'SQL_NOT_FOUND');
  return text;
}

function stmt(s: HranaWireStmt, sqls: Map<number, string>): HranaStmt {
  const sql = sqlOf(s, sqls);
  const wantRows = s.want_rows ?? true;
  const named = s.named_args ?? [];
  const positional = s.args ?? [];
  if (named.length > 0 && positional.length > 0) {
    throw new StepRefused(
      'this server binds either positional args or named_args in one statement, not both',
    );
  }
  if (named.length > 0) {
    const args: Record<string, SqlArg> = {};
    for (const a of named) args[a.name] = arg(a.value);
    return { sql, args, wantRows };
  }
  return positional.length > 0 ? { sql, args: positional.map(arg), wantRows } : { sql, wantRows };
}

/** Hrana Value -> nube argument encoding (schemas.ts): floats stay REAL, integers are never rounded. */
function arg(v: HranaWireValue): SqlArg {
  switch (v.type) {
    case 'null':
      return null;
    case 'integer':
      return { integer: v.value };
    case 'float':
      // -0 spelled out: the request reaches the executor as JSON, which prints -0 as 0.
      return { real: Object.is(v.value, -0) ? '-0' : v.value };
    case 'text':
      return v.value;
    case 'blob':
      return { base64: v.base64 };
  }
}
