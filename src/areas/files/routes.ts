import { pipeline } from 'node:stream/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { BlobHttpResponse } from '../../blob/index.js';
import { notFoundOnNulParams } from '../../platform/rest.js';
import { errorResponse, type FileTransfers } from './transfers.js';

/**
 * Sends a blob response on the raw socket. Fastify's reply would buffer nothing either, but writing
 * to `reply.raw` after `hijack()` keeps its serializers and hooks off a multi-GB stream.
 */
export async function sendBlob(reply: FastifyReply, out: BlobHttpResponse): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(out.status, { ...out.headers, 'x-request-id': String(reply.request.id) });
  if (!out.body) {
    res.end();
    return;
  }
  await pipeline(out.body, res).catch(() => {
    // The client went away mid-download: pipeline destroyed both ends; nothing else to clean up.
  });
}

/** Answers an error on a byte route: ApiError/BlobError keep their status, anything else is logged. */
export function sendError(req: FastifyRequest, reply: FastifyReply, err: unknown, closeConnection = false): void {
  const known = errorResponse(err);
  if (!known) req.log.error({ err }, 'blob route failed');
  const { status, body } = known ?? { status: 500, body: { error: 'internal error', code: 'InternalError' } };
  if (reply.raw.headersSent) {
    reply.raw.destroy();
    return;
  }
  if (reply.sent) return;
  // An unread upload body would otherwise be drained (up to 5 GB) before the next request.
  if (closeConnection) reply.header('connection', 'close');
  void reply.code(status).send(body);
}

/** Routes outside /api/v2: presigned URLs (`/blob/<token>`) and the stable URLs of public files. */
export function fileRoutes(app: FastifyInstance, transfers: FileTransfers): void {
  void app.register(async (scope) => {
    // The PUT body is the file itself: leave it unparsed and stream `req.raw` into the store.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    // A file id with NUL names nothing (and PostgreSQL could not even look it up).
    scope.addHook('onRequest', notFoundOnNulParams);

    scope.put<{ Params: { token: string } }>('/blob/:token', async (req, reply) => {
      try {
        const file = await transfers.receive(req.params.token, req.raw, req.headers);
        return reply.code(200).send({ file });
      } catch (err) {
        sendError(req, reply, err, !req.raw.readableEnded);
      }
    });

    scope.route<{ Params: { token: string } }>({
      method: ['GET', 'HEAD'],
      url: '/blob/:token',
      handler: async (req, reply) => {
        try {
          await sendBlob(reply, await transfers.serveToken(req.params.token, req.headers, req.method));
        } catch (err) {
          sendError(req, reply, err);
        }
      },
    });

    // The name segment is for people and downloads; the id alone decides, so a rename keeps old links.
    for (const url of ['/public/files/:id', '/public/files/:id/*']) {
      scope.route<{ Params: { id: string } }>({
        method: ['GET', 'HEAD'],
        url,
        handler: async (req, reply) => {
          try {
            await sendBlob(reply, await transfers.servePublic(req.params.id, req.headers, req.method));
          } catch (err) {
            sendError(req, reply, err);
          }
        },
      });
    }
  });
}
