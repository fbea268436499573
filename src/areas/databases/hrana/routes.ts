import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { PlatformDeps } from '../../deps.js';
import type { Principal } from '../../../platform/auth.js';
import { ApiError, errors } from '../../../platform/errors.js';
import { mayRelayAgain } from '../../../platform/node-forward.js';
import { ElsewhereError } from '../../../platform/nodes.js';
import { parseOr400 } from '../../../platform/validate.js';
import type { DatabasesService } from '../service.js';
import { runPipeline } from './pipeline.js';
import { HranaStreams } from './streams.js';
import { pipelineBodySchema } from './wire.js';

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
    void databases.closeStream(s.dbId, s.id).catch((err: unknown) => deps.log.warn({ err }, 'closing an expired libSQL stream failed'));
  });
  // On shutdown the engine ends its executors, and every stream's connection (rolling back) with them.

  const authenticate = async (req: FastifyRequest): Promise<Principal> => {
    const p = await deps.auth.authenticate(
      { authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] },
      ['owner', 'database'],
    );
    const rl = await deps.rateLimiter.consume(`${p.ownerId}:databases.query`, RATE_RULE);
    if (!rl.allowed) throw errors.tooManyRequests(rl.retryAfterSec);
    return p;
  };

  const pipeline = async (req: FastifyRequest<{ Params: { dbId: string } }>, reply: FastifyReply) => {
    try {
      const p = await authenticate(req);
      const body = parseOr400(pipelineBodySchema, req.body, 'body');
      return reply.send(await runPipeline(databases, streams, p, req.params.dbId, body));
    } catch (err) {
      // The database moved to another node while this request waited (a drain): it follows it once.
      if (err instanceof ElsewhereError) {
        if (mayRelayAgain(req)) return deps.forwarder.forward(req, reply, err.nodeId, 'parsed');
        return sendError(reply, errors.unavailable(`this database is moving to node ${err.nodeId}; retry`, 1), deps);
      }
      return sendError(reply, err, deps);
    }
  };
  app.post('/libsql/:dbId/v2/pipeline', pipeline);
  // v3 over JSON has the same pipeline (plus get_autocommit, served on both); cursors are not served.
  app.post('/libsql/:dbId/v3/pipeline', pipeline);
  app.post('/libsql/:dbId/v3/cursor', (_req, reply) =>
    sendError(reply, errors.notImplemented('Hrana v3 cursors (POST /v3/cursor); use /v2/pipeline'), deps),
  );
  // Version probes: a 200 here says the version is spoken. v3-protobuf is not, so clients use JSON v2.
  app.get('/libsql/:dbId/v2', (_req, reply) => reply.type('text/plain').send('Hrana v2 over HTTP (JSON)\n'));
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
  return reply.header('content-type', 'application/json').send(Buffer.from(JSON.stringify(body)));
}
