import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { PlatformDeps } from '../../deps.js';
import type { Principal } from '../../../platform/auth.js';
import { ApiError, errors } from '../../../platform/errors.js';
import { mayRelayAgain } from '../../../platform/node-forward.js';
import { ElsewhereError } from '../../../platform/nodes.js';
import { parseOr400 } from '../../../platform/validate.js';
import type { DatabasesService } from '../service.js';
import { runPipeline, type StreamOutcome } from './pipeline.js';
import { HranaStreams } from './streams.js';
import { cursorEntries } from './cursor.js';
import { mountLibsqlWs } from './ws.js';
import { cursorBodySchema, hranaJson, pipelineBodySchema } from './wire.js';

/** Same budget as POST /databases/{dbId}/query, and counted with it. */
const RATE_RULE = { points: 600_000, windowSeconds: 60 };

/**
 * libSQL's Hrana over HTTP at `/libsql/{dbId}/` (the database's `libsqlUrl`): `@libsql/client`
 * with that URL and a nube key (or a database token) as authToken works unchanged. Errors of a
 * whole request answer `{ message, code }` (what the client surfaces) plus nube's `error`/`issues`.
 */
export function mountLibsql(app: FastifyInstance, databases: DatabasesService, deps: PlatformDeps): void {
  const cfg = deps.config.databases;
  const streams = new HranaStreams(cfg.libsqlStreamIdleMs, cfg.libsqlStreamsPerOwner, (s) => {
    void databases
      .closeStream(s.dbId, s.id)
      .catch((err: unknown) => deps.log.warn({ err }, 'closing an expired libSQL stream failed'));
  });
  // On shutdown the engine ends its executors, and every stream's connection (rolling back) with them.

  const consume = async (p: Principal): Promise<void> => {
    const rl = await deps.rateLimiter.consume(`${p.ownerId}:databases.query`, RATE_RULE);
    if (!rl.allowed) throw errors.tooManyRequests(rl.retryAfterSec);
  };
  const authenticate = async (req: FastifyRequest): Promise<Principal> => {
    const p = await deps.auth.authenticate(
      { authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] },
      ['owner', 'database'],
    );
    await consume(p);
    return p;
  };
  // The same over WebSocket: the credential arrives in the `hello` message, each pipeline is counted.
  mountLibsqlWs(app, databases, streams, {
    authorize: async (authorization) =>
      deps.auth.authenticate({ authorization, apiKey: undefined }, ['owner', 'database']),
    consume,
    maxPayload: deps.config.bodyLimitBytes,
    log: deps.log,
  });

  type Req = FastifyRequest<{ Params: { dbId: string } }>;
  /** Authenticates, runs `fn` and answers; Hrana wants whole-request errors as `{ message, code }`. */
  const serve =
    (fn: (p: Principal, req: Req, reply: FastifyReply) => Promise<unknown>) =>
    async (req: Req, reply: FastifyReply) => {
      try {
        return await fn(await authenticate(req), req, reply);
      } catch (err) {
        // The database moved to another node while this request waited (a drain): it follows it once.
        if (err instanceof ElsewhereError) {
          if (mayRelayAgain(req)) return deps.forwarder.forward(req, reply, err.nodeId, 'parsed');
          return sendError(
            reply,
            errors.unavailable(`this database is moving to node ${err.nodeId}; retry`, 1),
            deps,
          );
        }
        return sendError(reply, err, deps);
      }
    };
  const pipeline = serve(async (p, req, reply) => {
    const body = parseOr400(pipelineBodySchema, req.body, 'body');
    return sendJson(reply, await runPipeline(databases, streams, p, req.params.dbId, body));
  });
  app.post('/libsql/:dbId/v2/pipeline', pipeline);
  // v3 over JSON has the same pipeline (plus get_autocommit, served on both) and cursors.
  app.post('/libsql/:dbId/v3/pipeline', pipeline);
  app.post(
    '/libsql/:dbId/v3/cursor',
    serve(async (p, req, reply) => {
      const body = parseOr400(cursorBodySchema, req.body, 'body');
      // The batch runs as one pipeline request of the stream; its results go out as cursor entries,
      // one JSON object a line, after a first line with the stream's next baton.
      const r = await runPipeline(databases, streams, p, req.params.dbId, {
        baton: body.baton,
        requests: [{ type: 'batch', batch: body.batch }],
      });
      const lines = [{ baton: r.baton, base_url: null }, ...cursorEntries(r.results[0] as StreamOutcome)];
      return reply
        .header('content-type', 'text/plain')
        .send(Buffer.from(lines.map((l) => `${hranaJson(l)}\n`).join('')));
    }),
  );
  // Version probes: a 200 here says the version is spoken. v3-protobuf is not, so clients use JSON.
  app.get('/libsql/:dbId/v2', (_req, reply) => reply.type('text/plain').send('Hrana v2 over HTTP (JSON)\n'));
  app.get('/libsql/:dbId/v3', (_req, reply) => reply.type('text/plain').send('Hrana v3 over HTTP (JSON)\n'));
}

function sendError(reply: FastifyReply, err: unknown, deps: PlatformDeps) {
  if (err instanceof ApiError) {
    for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
    return sendJson(reply.code(err.status), { message: err.message, ...err.toBody() });
  }
  deps.log.error({ err }, 'libSQL pipeline failed');
  const body = { message: 'internal error', error: 'internal error', code: 'InternalError' };
  return sendJson(reply.code(500), body);
}

/** The client reads `message` only when the type is exactly application/json: a Buffer keeps it so. */
function sendJson(reply: FastifyReply, body: unknown) {
  return reply.header('content-type', 'application/json').send(Buffer.from(hranaJson(body)));
}
