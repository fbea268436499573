import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  paginateListObjectsV2,
  type S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { BlobError, InvalidRange, NotFound, TooLarge, Unsupported } from './errors.js';
import { assertValidKey, assertValidPrefix } from './keys.js';
import { checkPutOptions, Meter, toBuffer } from './meter.js';
import type {
  BlobBody,
  BlobHead,
  BlobStore,
  GetOptions,
  GetResult,
  ListEntry,
  PresignOptions,
  PutOptions,
  PutResult,
} from './types.js';

export interface S3BlobStoreOptions {
  location: string;
  client: S3Client;
  bucket: string;
  /** Optional key prefix inside the bucket, so several locations can share one bucket. */
  prefix?: string;
  /** Multipart part size (default and minimum 5 MiB) and parallel parts (default 2): memory per upload is
   * about partSize * (queueSize + 2); raise both for throughput to a remote S3. */
  partSize?: number;
  queueSize?: number;
  /** Milliseconds since the epoch; presigned URLs are signed at this time (testable expiry). */
  now?: () => number;
}

const DEFAULT_TYPE = 'application/octet-stream';
const MIN_PART = 5 * 1024 * 1024;

function status(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

const unquote = (etag: string | undefined): string => (etag ?? '').replace(/^(W\/)?"|"$/g, '');

export class S3BlobStore implements BlobStore {
  readonly backend = 's3' as const;
  readonly location: string;
  readonly #client: S3Client;
  readonly #bucket: string;
  readonly #prefix: string;
  readonly #partSize: number;
  readonly #queueSize: number;
  readonly #now: () => number;

  constructor(options: S3BlobStoreOptions) {
    this.location = options.location;
    this.#client = options.client;
    this.#bucket = options.bucket;
    this.#prefix = options.prefix ? `${options.prefix.replace(/\/+$/, '')}/` : '';
    this.#partSize = Math.max(options.partSize ?? MIN_PART, MIN_PART);
    this.#queueSize = options.queueSize ?? 2;
    this.#now = options.now ?? Date.now;
  }

  #k(key: string): string {
    assertValidKey(key);
    return this.#prefix + key;
  }

  async put(key: string, body: BlobBody, options: PutOptions = {}): Promise<PutResult> {
    const Key = this.#k(key);
    checkPutOptions(options);
    const meter = new Meter(options);
    let refused: BlobError | undefined;
    // The meter runs inside the body stream: when it throws, the stream errors before the last part is
    // sent, so lib-storage aborts the multipart upload (or never sends the single PUT) and no object
    // appears. The caller's stream is unpiped, not destroyed (see iterateBody).
    const metered = new Transform({
      transform(chunk: unknown, _enc: BufferEncoding, cb: TransformCallback) {
        try {
          const buf = toBuffer(chunk);
          meter.add(buf);
          cb(null, buf);
        } catch (err) {
          if (err instanceof BlobError) refused = err;
          cb(err as Error);
        }
      },
      flush(cb: TransformCallback) {
        try {
          meter.finish();
          cb();
        } catch (err) {
          if (err instanceof BlobError) refused = err;
          cb(err as Error);
        }
      },
    });
    const source = body instanceof Readable ? body : Readable.from(body, { objectMode: false });
    source.pipe(metered);
    source.once('error', (err) => metered.destroy(err));
    const upload = new Upload({
      client: this.#client,
      params: { Bucket: this.#bucket, Key, Body: metered, ContentType: options.contentType ?? DEFAULT_TYPE },
      partSize: this.#partSize,
      queueSize: this.#queueSize,
      leavePartsOnError: false,
    });
    try {
      const out = await upload.done();
      const { size, sha256 } = meter.finish();
      return { size, sha256, etag: unquote(out.ETag) };
    } catch (err) {
      source.unpipe(metered);
      metered.destroy();
      // Our typed error wins, even when lib-storage reports a failed AbortMultipartUpload instead
      // (some S3-compatible servers lack it; a bucket lifecycle rule then reclaims the parts).
      if (refused) throw refused;
      throw err;
    }
  }

  async get(key: string, options: GetOptions = {}): Promise<GetResult> {
    const Key = this.#k(key);
    const r = options.range;
    if (r && (!Number.isSafeInteger(r.start) || !Number.isSafeInteger(r.end) || r.start < 0 || r.end < r.start)) {
      throw new InvalidRange(-1, 'range must have integer 0 <= start <= end');
    }
    try {
      const out = await this.#client.send(
        new GetObjectCommand({ Bucket: this.#bucket, Key, Range: r ? `bytes=${r.start}-${r.end}` : undefined }),
      );
      const contentLength = out.ContentLength ?? 0;
      let size = contentLength;
      let range: { start: number; end: number } | undefined;
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(out.ContentRange ?? '');
      if (m) {
        range = { start: Number(m[1]), end: Number(m[2]) };
        size = Number(m[3]);
      } else if (r) {
        // A server may ignore the range (e.g. an empty object); serve what was asked from the whole.
        throw new InvalidRange(size);
      }
      return {
        stream: out.Body as Readable,
        size,
        contentLength,
        range,
        contentType: out.ContentType ?? DEFAULT_TYPE,
        etag: unquote(out.ETag),
        lastModified: out.LastModified ?? new Date(0),
      };
    } catch (err) {
      if (err instanceof BlobError) throw err;
      if (status(err) === 404) throw new NotFound(key);
      if (status(err) === 416) {
        const head = await this.head(key);
        throw new InvalidRange(head?.size ?? 0);
      }
      throw err;
    }
  }

  async head(key: string): Promise<BlobHead | null> {
    try {
      const out = await this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: this.#k(key) }));
      return {
        size: out.ContentLength ?? 0,
        contentType: out.ContentType ?? DEFAULT_TYPE,
        etag: unquote(out.ETag),
        lastModified: out.LastModified ?? new Date(0),
      };
    } catch (err) {
      if (status(err) === 404) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    // S3's DeleteObject already succeeds on a missing key.
    await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.#k(key) }));
  }

  async copy(from: string, to: string): Promise<BlobHead> {
    const source = `${this.#bucket}/${this.#k(from).split('/').map(encodeURIComponent).join('/')}`;
    try {
      // Server-side: the bytes never pass through nube. CopyObject handles objects up to 5 GB.
      await this.#client.send(
        new CopyObjectCommand({ Bucket: this.#bucket, Key: this.#k(to), CopySource: source, MetadataDirective: 'COPY' }),
      );
    } catch (err) {
      if (status(err) === 404) throw new NotFound(from);
      throw err;
    }
    const head = await this.head(to);
    if (!head) throw new NotFound(to);
    return head;
  }

  async *list(prefix: string): AsyncIterable<ListEntry> {
    assertValidPrefix(prefix);
    const pages = paginateListObjectsV2(
      { client: this.#client, pageSize: 1000 },
      { Bucket: this.#bucket, Prefix: this.#prefix + prefix },
    );
    for await (const page of pages) {
      for (const o of page.Contents ?? []) {
        if (!o.Key) continue;
        yield { key: o.Key.slice(this.#prefix.length), size: o.Size ?? 0, lastModified: o.LastModified ?? new Date(0) };
      }
    }
  }

  async presign(key: string, options: PresignOptions): Promise<string> {
    const Key = this.#k(key);
    const signingDate = new Date(this.#now());
    if (options.method === 'GET') {
      const cmd = new GetObjectCommand({ Bucket: this.#bucket, Key });
      return getSignedUrl(this.#client, cmd, { expiresIn: options.expiresInSeconds, signingDate });
    }
    // A presigned PUT can pin an exact Content-Length (signed) but not an upper bound.
    if (options.maxBytes !== undefined && options.size === undefined) {
      throw new Unsupported('an S3 presigned PUT cannot enforce maxBytes without an exact size');
    }
    if (options.size !== undefined && options.maxBytes !== undefined && options.size > options.maxBytes) {
      throw new TooLarge(options.maxBytes);
    }
    const cmd = new PutObjectCommand({
      Bucket: this.#bucket,
      Key,
      ContentType: options.contentType,
      ContentLength: options.size,
    });
    return getSignedUrl(this.#client, cmd, {
      expiresIn: options.expiresInSeconds,
      signingDate,
      signableHeaders: new Set(options.contentType ? ['content-type', 'content-length'] : ['content-length']),
    });
  }
}
