import { type CredentialResolver, type Principal, SCHEMES } from '../../platform/auth.js';
import { sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { FilesService } from '../files/service.js';
import type { ShareTokenRow, ShareTokensRepo } from './repo.js';

const view = (r: ShareTokenRow) => ({
  id: r.id,
  fileId: r.fileId,
  documentId: r.documentId,
  preview: r.preview,
  expiresAt: new Date(r.expiresAt).toISOString(),
  createdAt: new Date(r.createdAt).toISOString(),
});

/**
 * Temporary links to one file (served at `/share/<token>`) or, once documents exist, one document's PDF
 * export (`?token=`). Tokens are `shr_` + 40 base62 characters, stored only as SHA-256.
 */
export class ShareTokensService {
  constructor(
    private readonly repo: ShareTokensRepo,
    private readonly files: FilesService,
    private readonly publicUrl: () => string,
  ) {}

  // One clock with files, so tests that move time expire links and read URLs together.
  private now(): number {
    return this.files.now();
  }

  async create(p: Principal, input: { fileId?: string; documentId?: string; expiresInSeconds: number }) {
    if (input.documentId !== undefined) {
      throw errors.notImplemented('sharing a document (its PDF export, part of the documents area)');
    }
    // Only a DONE file of the caller can be shared; anything else is the usual 404.
    await this.files.doneRow(p, input.fileId as string);
    const token = SCHEMES.share.prefix + randomToken(40, BASE62);
    const now = this.now();
    const row: ShareTokenRow = {
      id: newId('shr'),
      ownerId: p.ownerId,
      preview: `${token.slice(0, 10)}…`,
      fileId: input.fileId ?? null,
      documentId: null,
      expiresAt: now + input.expiresInSeconds * 1000,
      createdAt: now,
      revokedAt: null,
    };
    await this.repo.insert(row, sha256Hex(token));
    return { ...view(row), token, url: `${this.publicUrl()}/share/${token}` };
  }

  async list(p: Principal) {
    return { items: (await this.repo.listLive(p.ownerId, this.now())).map(view) };
  }

  async revoke(p: Principal, id: string): Promise<void> {
    if (!(await this.repo.revoke(p.ownerId, id, this.now()))) throw errors.notFound('share token');
  }

  /** The live token's row; unknown, revoked or expired is a 403 (the link itself is the credential). */
  async resolve(token: string): Promise<ShareTokenRow> {
    const row = token.startsWith(SCHEMES.share.prefix) ? await this.repo.byHash(sha256Hex(token)) : undefined;
    if (!row) throw errors.forbidden('this share link is not valid', 'ShareTokenInvalid');
    if (row.revokedAt !== null) throw errors.forbidden('this share link was revoked', 'ShareTokenRevoked');
    if (row.expiresAt <= this.now()) throw errors.forbidden('this share link has expired', 'ShareTokenExpired');
    return row;
  }

  /** The `share` credential scheme, for operations that accept `?token=` (the PDF export). */
  readonly resolver: CredentialResolver = {
    scheme: 'share',
    resolve: async (credential) => {
      const row = await this.resolve(credential).catch(() => undefined);
      if (!row) return null;
      return {
        scheme: 'share',
        ownerId: row.ownerId,
        plan: await this.files.planOf(row.ownerId),
        credentialId: row.id,
        resourceId: row.documentId ?? row.fileId ?? undefined,
      };
    },
  };
}
