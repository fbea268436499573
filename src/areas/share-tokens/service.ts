import { type CredentialResolver, type Principal, SCHEMES } from '../../platform/auth.js';
import { sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { DocumentsService } from '../documents/service.js';
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
 * Temporary links to one file or one document, both at `/share/<token>`; a document's token also
 * works as `?token=` on its PDF export. Tokens are `shr_` + 40 base62 characters, stored only as SHA-256.
 */
export class ShareTokensService {
  constructor(
    private readonly repo: ShareTokensRepo,
    private readonly files: FilesService,
    private readonly publicUrl: () => string,
    /** The documents area is built after this one; asked only when a token is made for a document. */
    private readonly documents: () => DocumentsService | undefined,
  ) {}

  // One clock with files, so tests that move time expire links and read URLs together.
  private now(): number {
    return this.files.now();
  }

  async create(p: Principal, input: { fileId?: string; documentId?: string; expiresInSeconds: number }) {
    if (input.documentId !== undefined) {
      const documents = this.documents();
      if (!documents) throw errors.notImplemented('sharing a document');
      await documents.assertOwned(p, input.documentId);
    } else {
      // Only a DONE file of the caller can be shared; anything else is the usual 404.
      await this.files.doneRow(p, input.fileId as string);
    }
    const token = SCHEMES.share.prefix + randomToken(40, BASE62);
    const now = this.now();
    const row: ShareTokenRow = {
      id: newId('shr'),
      ownerId: p.ownerId,
      preview: `${token.slice(0, 10)}…`,
      fileId: input.fileId ?? null,
      documentId: input.documentId ?? null,
      expiresAt: now + input.expiresInSeconds * 1000,
      createdAt: now,
      revokedAt: null,
    };
    await this.repo.insert(row, sha256Hex(token));
    const pdfUrl = row.documentId ? this.pdfUrl(row.documentId, token) : null;
    return { ...view(row), token, url: `${this.publicUrl()}/share/${token}`, pdfUrl };
  }

  pdfUrl(documentId: string, token: string): string {
    return `${this.publicUrl()}/api/v2/documents/${encodeURIComponent(documentId)}/pdf?token=${token}&inline=1`;
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

  /**
   * The `share` credential scheme, for operations that accept `?token=` (the PDF export). A token that
   * is unknown, revoked or expired is a 403 with its reason (the spec's "403 when wrong or expired"),
   * not the 401 of a missing credential.
   */
  readonly resolver: CredentialResolver = {
    scheme: 'share',
    resolve: async (credential) => {
      const row = await this.resolve(credential);
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
