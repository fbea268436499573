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
    const shareTokens = new ShareTokensService(new ShareTokensRepo(deps.store.db), other.files, deps.publicUrl);
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
          if (!row.fileId) throw new Error(`share token ${row.id} has no file`);
          await sendBlob(reply, await services.files.transfers.serveOwned(row.ownerId, row.fileId, req.headers, req.method));
        } catch (err) {
          sendError(req, reply, err);
        }
      },
    });
  },
};
