import {
  type BlobBody,
  BlobError,
  type BlobHttpResponse,
  receiveUpload,
  type RequestHeaders,
  serveBlob,
} from '../../blob/index.js';
import { ApiError, errors } from '../../platform/errors.js';
import { assertStorageAvailable } from '../../platform/limits.js';
import type { PlanName } from '../../platform/plans.js';
import { blobKey, fileIdOfKey } from './blobs.js';
import type { FileRow } from './repo.js';
import type { FilesCore } from './core.js';
import type { File } from './schemas.js';

/** Looks up an owner's plan (the account area's), to check the storage allowance at upload time. */
export type PlanOf = (ownerId: string) => Promise<PlanName>;

/**
 * The byte paths outside /api/v2: PUT/GET of nube-signed URLs, stable public URLs and share links.
 * Every failure is an ApiError (or a BlobError carrying its HTTP status), never a bare 500.
 */
export class FileTransfers {
  constructor(
    private readonly files: FilesCore,
    private readonly planOf: PlanOf,
  ) {}

  /** PUT putUrl: verify, claim the URL once, check the allowance, stream to the store, mark DONE. */
  async receive(token: string, body: BlobBody, headers: RequestHeaders): Promise<File> {
    const grant = this.files.urls.verify(token, 'PUT');
    const id = fileIdOfKey(grant.key);
    const row = await this.files.repo.byId(id);
    const now = this.files.now();
    if (
      row?.status !== 'PENDING' ||
      !grant.nonce ||
      !(await this.files.repo.claimUpload(id, grant.nonce, now))
    ) {
      throw errors.forbidden('this upload URL was already used', 'UploadUrlUsed');
    }
    let ok = false;
    try {
      // Checked again now: other uploads may have completed since POST /files.
      assertStorageAvailable(
        await this.planOf(row.owner_id),
        await this.files.repo.storedBytes(row.owner_id),
        row.size,
      );
      const put = await receiveUpload(
        this.files.stores.at(grant.location),
        { ...grant, method: 'PUT' },
        body,
        headers,
      );
      const done: FileRow = { ...row, status: 'DONE', sha256: put.sha256, upload_nonce: null };
      const file = this.files.view(done);
      // The record turns DONE in the commit that records file.created: an acknowledged upload has its event.
      if (!(await this.files.completeUpload(row, put.sha256, file))) {
        // The record expired while the bytes streamed in: nothing references the object any more.
        await this.files.stores.at(grant.location).delete(grant.key);
        throw errors.forbidden('the upload URL expired during the upload', 'UploadUrlExpired');
      }
      ok = true;
      await this.files.enqueueEmbed(id);
      await this.files.uploaded(id);
      return file;
    } finally {
      // A refused or broken upload frees the URL for a retry until it expires; bytes never landed
      // (the store writes to a temp file and renames only on success).
      if (!ok) await this.files.repo.releaseUpload(id);
    }
  }

  /** GET/HEAD of a readUrl: the record must still be DONE at the signed key (access moves the key). */
  async serveToken(token: string, headers: RequestHeaders, method: string): Promise<BlobHttpResponse> {
    const grant = this.files.urls.verify(token, method);
    const row = await this.files.repo.byId(fileIdOfKey(grant.key));
    if (row?.status !== 'DONE' || blobKey(row.access, row.owner_id, row.id) !== grant.key)
      throw errors.notFound('file');
    return serveBlob(this.files.stores.at(grant.location), grant.key, headers, method);
  }

  /** The stable URL of a public file; a private, deleted or missing file is the same 404. */
  async servePublic(id: string, headers: RequestHeaders, method: string): Promise<BlobHttpResponse> {
    const row = await this.files.repo.byId(id);
    if (row?.status !== 'DONE' || row.access !== 'public') throw errors.notFound('file');
    return this.serveRow(row, headers, method);
  }

  /** A DONE file of `ownerId` (share links). */
  async serveOwned(
    ownerId: string,
    id: string,
    headers: RequestHeaders,
    method: string,
  ): Promise<BlobHttpResponse> {
    const row = await this.files.repo.byId(id);
    if (!row || row.owner_id !== ownerId || row.status !== 'DONE') throw errors.notFound('file');
    return this.serveRow(row, headers, method);
  }

  private serveRow(row: FileRow, headers: RequestHeaders, method: string): Promise<BlobHttpResponse> {
    return serveBlob(
      this.files.stores.at(row.region),
      blobKey(row.access, row.owner_id, row.id),
      headers,
      method,
    );
  }
}

/** HTTP status and JSON body for an error on a byte route. */
export function errorResponse(err: unknown): { status: number; body: Record<string, unknown> } | undefined {
  if (err instanceof ApiError) return { status: err.status, body: err.toBody() };
  if (err instanceof BlobError)
    return { status: err.httpStatus, body: { error: err.message, code: err.code } };
  return undefined;
}
