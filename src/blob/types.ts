import type { Readable } from 'node:stream';

/** Inclusive byte offsets, as in an HTTP `Range: bytes=start-end` header. */
export interface ByteRange {
  start: number;
  end: number;
}

export type BlobBody = Readable | AsyncIterable<Uint8Array>;

export interface PutOptions {
  /** Stored and sent back on reads; `application/octet-stream` when absent. */
  contentType?: string;
  /** More bytes than this aborts the write with `TooLarge`; nothing is left behind. */
  maxBytes?: number;
  /** A different byte count aborts the write with `SizeMismatch`; nothing is left behind. */
  expectedSize?: number;
}

export interface PutResult {
  size: number;
  /** Lowercase hex SHA-256 of the bytes, computed while streaming. */
  sha256: string;
  /** Unquoted entity tag, the same value `head` and `get` return afterwards. */
  etag: string;
}

export interface BlobHead {
  size: number;
  contentType: string;
  etag: string;
  lastModified: Date;
}

export interface GetOptions {
  /** Clamped to the object's size like S3 does; a start at or past the end throws `InvalidRange`. */
  range?: ByteRange;
}

export interface GetResult extends BlobHead {
  /** The caller must consume or destroy it: it holds an open file or socket. */
  stream: Readable;
  /** The range actually served (after clamping), absent for a whole-object read. */
  range?: ByteRange;
  /** Bytes in `stream`. */
  contentLength: number;
}

export interface ListEntry {
  key: string;
  size: number;
  lastModified: Date;
}

export interface PresignOptions {
  method: 'GET' | 'PUT';
  expiresInSeconds: number;
  /** PUT: the content type the upload is stored with (S3 signs it, so the uploader must send it). */
  contentType?: string;
  /** PUT: upper bound on the body (local backend only; S3 cannot enforce it on a presigned PUT). */
  maxBytes?: number;
  /** PUT: the exact byte count the upload must have (S3 signs it as Content-Length). */
  size?: number;
}

export interface BlobStore {
  /** The name of the location (e.g. a region) this store writes to. */
  readonly location: string;
  readonly backend: 'local' | 's3';
  put(key: string, body: BlobBody, options?: PutOptions): Promise<PutResult>;
  get(key: string, options?: GetOptions): Promise<GetResult>;
  /** `null` when there is no object at `key`. */
  head(key: string): Promise<BlobHead | null>;
  /** Succeeds whether or not the object exists. */
  delete(key: string): Promise<void>;
  /** Server-side where the backend can; overwrites `to`. Throws `NotFound` if `from` is missing. */
  copy(from: string, to: string): Promise<BlobHead>;
  /** Keys starting with `prefix` (a plain string prefix, as in S3), in lexicographic order. */
  list(prefix: string): AsyncIterable<ListEntry>;
  presign(key: string, options: PresignOptions): Promise<string>;
}
