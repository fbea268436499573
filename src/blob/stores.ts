import { S3Client } from '@aws-sdk/client-s3';
import { UnknownLocation } from './errors.js';
import { LocalBlobStore } from './local.js';
import { S3BlobStore } from './s3.js';
import type { BlobStore } from './types.js';
import { UrlTokenSigner, type VerifiedToken } from './url-token.js';

/** Connection to one S3-compatible service (AWS, MinIO, R2, Ceph, s3rver ...). */
export interface S3ConnectionOptions {
  /** e.g. `http://127.0.0.1:9000`; omit for AWS. */
  endpoint?: string;
  region?: string;
  /** Path-style URLs (`endpoint/bucket/key`), which most self-hosted servers need. Default true. */
  forcePathStyle?: boolean;
  /** Omit to use the SDK's default provider chain (instance roles, ...). */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  partSize?: number;
  queueSize?: number;
}

export type BlobLocationOptions =
  | { backend: 'local'; dir: string }
  | {
      backend: 's3';
      bucket: string;
      prefix?: string;
      /** Overrides the top-level `s3` connection for this location (e.g. a bucket in another region). */
      s3?: S3ConnectionOptions;
    };

export interface BlobStoresOptions {
  /** Named locations, e.g. `{ LATAM: ..., US: ..., EU: ... }`; a file's region picks one. */
  locations: Record<string, BlobLocationOptions>;
  /** The location used when a caller names none. Must be a key of `locations`. */
  defaultLocation: string;
  /** Required when any location is local: signs and verifies nube's own URLs. */
  local?: { publicBaseUrl: string; signingKey: string | Uint8Array };
  /** Default connection for s3 locations. */
  s3?: S3ConnectionOptions;
  /** Milliseconds since the epoch; for tests of expiry. */
  now?: () => number;
}

export interface BlobStores {
  readonly defaultLocation: string;
  readonly names: readonly string[];
  /** The store for a location name; `undefined` means the default. Throws `UnknownLocation`. */
  at(location?: string): BlobStore;
  /**
   * Verifies a token from a local presigned URL (`<publicBaseUrl>/<token>`). Throws `BadSignature` or
   * `Expired`. The caller resolves the store with `at(result.location)`.
   */
  verify(token: string, method: string): VerifiedToken;
  /** Releases S3 clients' sockets. */
  close(): void;
}

export function makeClient(conn: S3ConnectionOptions): S3Client {
  return new S3Client({
    endpoint: conn.endpoint,
    region: conn.region ?? 'us-east-1',
    forcePathStyle: conn.forcePathStyle ?? true,
    credentials: conn.credentials,
    // The SDK's default (CRC32 trailers with aws-chunked encoding) is not understood by many
    // S3-compatible servers; checksums only where the API requires them keeps every server working.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

export function createBlobStores(options: BlobStoresOptions): BlobStores {
  const names = Object.keys(options.locations);
  if (!names.includes(options.defaultLocation)) throw new UnknownLocation(options.defaultLocation);
  const needsLocal = names.some((n) => options.locations[n].backend === 'local');
  if (needsLocal && !options.local) throw new Error('blob options: a local location needs `local` (publicBaseUrl, signingKey)');
  const signer = options.local ? new UrlTokenSigner({ signingKey: options.local.signingKey, now: options.now }) : undefined;

  // One client per distinct connection, shared by the locations that use it (sockets are pooled).
  const clients = new Map<S3ConnectionOptions, S3Client>();
  const clientFor = (conn: S3ConnectionOptions | undefined): S3Client => {
    if (!conn) throw new Error('blob options: an s3 location needs `s3` connection options');
    let c = clients.get(conn);
    if (!c) {
      c = makeClient(conn);
      clients.set(conn, c);
    }
    return c;
  };

  const stores = new Map<string, BlobStore>();
  for (const name of names) {
    const loc = options.locations[name];
    if (loc.backend === 'local') {
      const local = options.local as NonNullable<BlobStoresOptions['local']>;
      stores.set(
        name,
        new LocalBlobStore({ location: name, dir: loc.dir, signer: signer as UrlTokenSigner, publicBaseUrl: local.publicBaseUrl }),
      );
    } else {
      const conn = loc.s3 ?? options.s3;
      stores.set(
        name,
        new S3BlobStore({
          location: name,
          client: clientFor(conn),
          bucket: loc.bucket,
          prefix: loc.prefix,
          partSize: conn?.partSize,
          queueSize: conn?.queueSize,
          now: options.now,
        }),
      );
    }
  }

  return {
    defaultLocation: options.defaultLocation,
    names,
    at(location) {
      const store = stores.get(location ?? options.defaultLocation);
      if (!store) throw new UnknownLocation(String(location));
      return store;
    },
    verify(token, method) {
      if (!signer) throw new Error('no local blob location: nothing signs nube blob URLs');
      const grant = signer.verify(token, method);
      // A validly signed token for a location that was since removed from config grants nothing.
      if (stores.get(grant.location)?.backend !== 'local') throw new UnknownLocation(grant.location);
      return grant;
    },
    close() {
      for (const c of clients.values()) c.destroy();
      for (const store of stores.values()) if (store instanceof LocalBlobStore) store.close();
    },
  };
}
