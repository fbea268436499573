// What the files service lends its helpers (transfers, search): declared here so they depend on this
// small contract and not on the service that builds them.
import type { BlobStores } from '../../blob/index.js';
import type { FileUrls } from './blobs.js';
import type { FileRow, FilesRepo } from './repo.js';
import type { File } from './schemas.js';

export interface FilesCore {
  readonly repo: FilesRepo;
  readonly stores: BlobStores;
  readonly urls: FileUrls;
  now(): number;
  view(row: FileRow): File;
  /** PENDING -> DONE with its file.created in one commit; false when the record went meanwhile. */
  completeUpload(row: FileRow, sha256: string, file: File): Promise<boolean>;
  enqueueEmbed(fileId: string): Promise<void>;
  /** The bytes of a file arrived: work asked for at its creation (HLS) starts. */
  uploaded(fileId: string): Promise<void>;
}
