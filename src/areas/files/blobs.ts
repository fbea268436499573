import { createHmac } from 'node:crypto';
import { type BlobStores, createBlobStores, type TokenMethod, UrlTokenSigner, type VerifiedToken } from '../../blob/index.js';
import type { Config } from '../../platform/config-shape.js';

/** Key of a file's object: public and private files live in separate key spaces. */
export function blobKey(access: string, ownerId: string, fileId: string): string {
  return `${access}/${ownerId}/${fileId}`;
}

/** The file id is the last segment of its key (see blobKey). */
export function fileIdOfKey(key: string): string {
  return key.slice(key.lastIndexOf('/') + 1);
}

/** Builds one store per region from the config (local directories or S3 buckets). */
export function storesFromConfig(config: Config): BlobStores {
  const blob = config.files.blob;
  if (blob.backend === 'local') {
    return createBlobStores({
      defaultLocation: 'LATAM',
      locations: Object.fromEntries(Object.entries(blob.dirs).map(([r, dir]) => [r, { backend: 'local' as const, dir }])),
      // The stores' own presign is not used by files (see FileUrls), but a local location requires it.
      local: { publicBaseUrl: `${config.publicUrl}/blob`, signingKey: subkey(config.secret, 'nube/blob-store') },
    });
  }
  return createBlobStores({
    defaultLocation: 'LATAM',
    locations: Object.fromEntries(
      Object.entries(blob.buckets).map(([r, b]) => [r, { backend: 's3' as const, bucket: b.bucket, prefix: b.prefix }]),
    ),
    s3: { endpoint: blob.endpoint, region: blob.region, forcePathStyle: blob.forcePathStyle, credentials: blob.credentials },
  });
}

function subkey(secret: string, purpose: string): Buffer {
  return createHmac('sha256', secret).update(purpose).digest();
}

/**
 * nube-signed URLs for uploads and reads, on both backends. Uploads always pass through nube (even on
 * S3) because only nube can make a URL single-use, check the storage allowance when the bytes arrive,
 * record the SHA-256 and mark the file DONE; reads go through nube too so expiry, tampering, Range and
 * ETag behave the same whatever the backend.
 */
export class FileUrls {
  readonly #signer: UrlTokenSigner;

  constructor(
    secret: string,
    private readonly baseUrl: () => string,
    now: () => number,
  ) {
    this.#signer = new UrlTokenSigner({ signingKey: subkey(secret, 'nube/files-url'), now });
  }

  upload(region: string, key: string, size: number, contentType: string, expiresInSeconds: number): { url: string; nonce: string } {
    const token = this.#signer.sign({ method: 'PUT', location: region, key, size, maxBytes: size, contentType, expiresInSeconds });
    const nonce = this.#signer.verify(token, 'PUT').nonce as string;
    return { url: `${this.baseUrl()}/blob/${token}`, nonce };
  }

  read(region: string, key: string, expiresInSeconds: number): string {
    return `${this.baseUrl()}/blob/${this.#signer.sign({ method: 'GET', location: region, key, expiresInSeconds })}`;
  }

  verify(token: string, method: TokenMethod | string): VerifiedToken {
    return this.#signer.verify(token, method);
  }
}
