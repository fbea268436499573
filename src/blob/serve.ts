import type { Readable } from 'node:stream';
import { BadSignature, BlobError, SizeMismatch, TooLarge } from './errors.js';
import { etagMatches, ifRangeHolds, parseRange } from './http-range.js';
import type { BlobBody, BlobHead, BlobStore, PutResult } from './types.js';
import type { VerifiedToken } from './url-token.js';

/** The subset of Node's `IncomingHttpHeaders` used here (lower-case names). */
export type RequestHeaders = Record<string, string | string[] | undefined>;

export interface BlobHttpResponse {
  status: number;
  headers: Record<string, string>;
  /** Present for GET with a body; the route pipes it to the response (and destroys it on abort). */
  body?: Readable;
}

function one(headers: RequestHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

function baseHeaders(head: BlobHead): Record<string, string> {
  return {
    etag: `"${head.etag}"`,
    'last-modified': head.lastModified.toUTCString(),
    'accept-ranges': 'bytes',
    // Stored bytes are user content served from nube's own origin: never sniff them into HTML, and
    // sandbox anything rendered so an uploaded page cannot run script with nube's cookies or origin.
    'x-content-type-options': 'nosniff',
    'content-security-policy': 'sandbox',
  };
}

/** 304 when the client's copy is current (RFC 9110 §13.2.2: If-None-Match wins over If-Modified-Since). */
function notModified(headers: RequestHeaders, head: BlobHead): boolean {
  const inm = one(headers, 'if-none-match');
  if (inm !== undefined) return etagMatches(inm, head.etag);
  const ims = one(headers, 'if-modified-since');
  if (ims === undefined) return false;
  const t = Date.parse(ims);
  // HTTP dates have one-second precision.
  return !Number.isNaN(t) && Math.floor(head.lastModified.getTime() / 1000) <= Math.floor(t / 1000);
}

/**
 * Framework-free GET/HEAD of a blob: status, headers and body stream, with single Range (206/416),
 * ETag, If-None-Match/If-Modified-Since (304), If-Range, the stored Content-Type and Content-Length.
 */
export async function serveBlob(
  store: BlobStore,
  key: string,
  reqHeaders: RequestHeaders,
  method: string,
): Promise<BlobHttpResponse> {
  if (method !== 'GET' && method !== 'HEAD') return { status: 405, headers: { allow: 'GET, HEAD' } };
  // A GET of the whole object is one read of the store: the validators come with the bytes.
  if (method === 'GET' && one(reqHeaders, 'range') === undefined) {
    let got: Awaited<ReturnType<BlobStore['get']>>;
    try {
      got = await store.get(key);
    } catch (err) {
      if (err instanceof BlobError && err.code === 'NotFound') return { status: 404, headers: {} };
      throw err;
    }
    const headers = baseHeaders(got);
    if (notModified(reqHeaders, got)) {
      got.stream.destroy();
      return { status: 304, headers };
    }
    headers['content-type'] = got.contentType;
    headers['content-length'] = String(got.contentLength);
    return { status: 200, headers, body: got.stream };
  }
  // The object can be replaced between head and get; one retry is enough to get a coherent answer.
  for (let attempt = 0; ; attempt++) {
    const head = await store.head(key);
    if (!head) return { status: 404, headers: {} };
    const headers = baseHeaders(head);
    if (notModified(reqHeaders, head)) return { status: 304, headers };

    let rangeHeader = one(reqHeaders, 'range');
    const ifRange = one(reqHeaders, 'if-range');
    if (rangeHeader !== undefined && ifRange !== undefined && !ifRangeHolds(ifRange, head.etag, head.lastModified)) {
      rangeHeader = undefined;
    }
    const decision = parseRange(rangeHeader, head.size);
    if (decision.kind === 'unsatisfiable') {
      return { status: 416, headers: { ...headers, 'content-range': `bytes */${head.size}` } };
    }
    const range = decision.kind === 'partial' ? decision.range : undefined;
    const contentLength = range ? range.end - range.start + 1 : head.size;
    headers['content-type'] = head.contentType;
    headers['content-length'] = String(contentLength);
    if (range) headers['content-range'] = `bytes ${range.start}-${range.end}/${head.size}`;
    const status = range ? 206 : 200;
    if (method === 'HEAD') return { status, headers };

    let got: Awaited<ReturnType<BlobStore['get']>>;
    try {
      got = await store.get(key, range ? { range } : {});
    } catch (err) {
      if (err instanceof BlobError && err.code === 'NotFound') return { status: 404, headers: {} };
      throw err;
    }
    if (got.etag === head.etag || attempt > 0) {
      if (got.etag !== head.etag) {
        got.stream.destroy();
        throw new Error(`blob ${key} changed twice while being served`);
      }
      return { status, headers, body: got.stream };
    }
    got.stream.destroy();
  }
}

export interface UploadGrant extends Pick<VerifiedToken, 'key' | 'contentType' | 'maxBytes' | 'size'> {
  method: 'PUT';
}

/**
 * The PUT side of a local presigned URL: checks Content-Length against the token's limits before
 * reading a byte (so an oversized upload gets its 413 at once), then streams the body into `put`,
 * which enforces the same limits on the bytes that actually arrive. The caller has already verified
 * the token and claimed its nonce.
 */
export async function receiveUpload(
  store: BlobStore,
  grant: UploadGrant,
  body: BlobBody,
  reqHeaders: RequestHeaders = {},
): Promise<PutResult> {
  if (grant.method !== 'PUT') throw new BadSignature('not an upload URL');
  const declared = one(reqHeaders, 'content-length');
  if (declared !== undefined && /^\d+$/.test(declared)) {
    const n = Number(declared);
    if (grant.maxBytes !== undefined && n > grant.maxBytes) throw new TooLarge(grant.maxBytes);
    if (grant.size !== undefined && n !== grant.size) throw new SizeMismatch(grant.size, n);
  }
  // The signed type wins over whatever the uploader sends, as with S3's signed Content-Type.
  const contentType = grant.contentType ?? one(reqHeaders, 'content-type') ?? undefined;
  return store.put(grant.key, body, { contentType, maxBytes: grant.maxBytes, expectedSize: grant.size });
}
