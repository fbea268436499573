import { errors } from '../../platform/errors.js';
import type { AreaModule } from '../area.js';
import { sendBlob, sendError } from '../files/routes.js';
import { shareTokensOperations } from './operations.js';
import { ShareTokensRepo, shareTokensMigrations } from './repo.js';
import { ShareTokensService } from './service.js';

export const share_tokensArea: AreaModule = {
  name: 'share-tokens',
  operations: shareTokensOperations,
  migrations: shareTokensMigrations,
  create(deps, other) {
    if (!other.files) throw new Error('the share-tokens area needs the files service to be created first');
    // `other` fills up as later areas are built, so documents is there by the time a token is made.
    const shareTokens = new ShareTokensService(new ShareTokensRepo(deps.store.db), other.files, deps.publicUrl, () => other.documents);
    deps.auth.register(shareTokens.resolver);
    return { shareTokens };
  },
  routes(app, services) {
    // The link is the credential: no other authentication, 403 once revoked or expired.
    app.route<{ Params: { token: string } }>({
      method: ['GET', 'HEAD'],
      url: '/share/:token',
      handler: async (req, reply) => {
        try {
          const row = await services.shareTokens.resolve(req.params.token);
          if (row.documentId) {
            const base = `/share/${req.params.token}/assets`;
            const pdfUrl = services.shareTokens.pdfUrl(row.documentId, req.params.token);
            const html = await services.documents.shareHtml(row.ownerId, row.documentId, base, pdfUrl);
            return reply
              .code(200)
              .header('content-type', 'text/html; charset=utf-8')
              .header('cache-control', 'private, no-store')
              .header('x-content-type-options', 'nosniff')
              // The page holds only sanitized content and the theme's CSS: no script may run.
              .header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' https: data:")
              .send(html);
          }
          if (!row.fileId) throw new Error(`share token ${row.id} has no file`);
          await sendBlob(reply, await services.files.transfers.serveOwned(row.ownerId, row.fileId, req.headers, req.method));
        } catch (err) {
          sendError(req, reply, err);
        }
      },
    });
    // The images of a shared document, only those the document shows.
    app.get<{ Params: { token: string; fileId: string } }>('/share/:token/assets/:fileId', async (req, reply) => {
      try {
        const row = await services.shareTokens.resolve(req.params.token);
        const asset = row.documentId ? await services.documents.shareAsset(row.ownerId, row.documentId, req.params.fileId) : null;
        if (!asset) throw errors.notFound('image');
        return reply
          .code(200)
          .header('content-type', asset.contentType)
          .header('cache-control', 'private, max-age=300')
          .header('x-content-type-options', 'nosniff')
          // A tenant's file on nube's own origin (the console's): an "image" that is really HTML or SVG
          // must not run script where the console's cookie and CSRF token live.
          .header('content-security-policy', 'sandbox')
          .send(asset.body);
      } catch (err) {
        sendError(req, reply, err);
      }
    });
  },
};
