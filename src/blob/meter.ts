import { createHash, type Hash } from 'node:crypto';
import { Readable } from 'node:stream';
import { SizeMismatch, TooLarge } from './errors.js';
import type { BlobBody, PutOptions } from './types.js';

export function checkPutOptions(options: PutOptions): void {
  for (const name of ['maxBytes', 'expectedSize'] as const) {
    const v = options[name];
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 0)) {
      throw new RangeError(`${name} must be a non-negative integer`);
    }
  }
  // Refuse before reading a byte: the upload could never succeed.
  if (options.maxBytes !== undefined && options.expectedSize !== undefined) {
    if (options.expectedSize > options.maxBytes) throw new TooLarge(options.maxBytes);
  }
}

/** Counts and hashes bytes as they stream past, enforcing `maxBytes` on every chunk. */
export class Meter {
  size = 0;
  readonly #hash: Hash = createHash('sha256');
  readonly #limit: number;
  readonly #options: PutOptions;

  constructor(options: PutOptions) {
    this.#options = options;
    // With an expected size, one byte more is already a mismatch: stop there instead of reading on.
    this.#limit = Math.min(options.maxBytes ?? Number.POSITIVE_INFINITY, options.expectedSize ?? Number.POSITIVE_INFINITY);
  }

  add(chunk: Buffer): void {
    this.size += chunk.byteLength;
    if (this.size > this.#limit) {
      const { maxBytes, expectedSize } = this.#options;
      if (maxBytes !== undefined && this.size > maxBytes) throw new TooLarge(maxBytes);
      throw new SizeMismatch(expectedSize as number, this.size);
    }
    this.#hash.update(chunk);
  }

  #result: { size: number; sha256: string } | undefined;

  /** Idempotent: the S3 path checks at end of stream and reads the result after the upload. */
  finish(): { size: number; sha256: string } {
    if (this.#result) return this.#result;
    const { expectedSize } = this.#options;
    if (expectedSize !== undefined && this.size !== expectedSize) throw new SizeMismatch(expectedSize, this.size);
    this.#result = { size: this.size, sha256: this.#hash.digest('hex') };
    return this.#result;
  }
}

export function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError('blob bodies must yield bytes (Buffer or Uint8Array), not strings or objects');
}

/**
 * Iterates a body without destroying it when we stop early (limit exceeded): the caller owns the
 * source, and for an HTTP request destroying it would kill the socket before a 413 can be sent.
 */
export function iterateBody(body: BlobBody): AsyncIterable<unknown> {
  if (body instanceof Readable) return body.iterator({ destroyOnReturn: false });
  return body;
}
