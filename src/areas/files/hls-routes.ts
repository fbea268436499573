// The byte routes of HLS renditions (outside /api/v2, like the files' own): a signed link's playlists
// and segments, and a public file's.
import type { FastifyInstance } from 'fastify';
import { notFoundOnNulParams } from '../../platform/rest.js';
import type { FileHls } from './hls.js';
import { sendBlob, sendError } from './routes.js';

export function hlsRoutes(app: FastifyInstance, hls: FileHls): void {
  void app.register(async (scope) => {
    scope.addHook('onRequest', notFoundOnNulParams);
    scope.route<{ Params: { token: string; '*': string } }>({
      method: ['GET', 'HEAD'],
      url: '/hls/:token/*',
      handler: async (req, reply) => {
        try {
          await sendBlob(
            reply,
            await hls.serveSigned(req.params.token, req.params['*'], req.headers, req.method),
          );
        } catch (err) {
          sendError(req, reply, err);
        }
      },
    });
    scope.route<{ Params: { id: string; '*': string } }>({
      method: ['GET', 'HEAD'],
      url: '/public/hls/:id/*',
      handler: async (req, reply) => {
        try {
          await sendBlob(
            reply,
            await hls.servePublic(req.params.id, req.params['*'], req.headers, req.method),
          );
        } catch (err) {
          sendError(req, reply, err);
        }
      },
    });
  });
}
