import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { BadSignature, Expired } from './errors.js';

export type TokenMethod = 'GET' | 'PUT';

/** What a verified token grants. `nonce` is set on PUT tokens so the caller can make them single-use. */
export interface VerifiedToken {
  method: TokenMethod;
  location: string;
  key: string;
  /** Unix seconds. */
  expiresAt: number;
  contentType?: string;
  maxBytes?: number;
  size?: number;
  nonce?: string;
}

export interface TokenSignerOptions {
  /** At least 32 bytes of secret. A purpose-bound subkey is derived from it, so it may be shared. */
  signingKey: string | Uint8Array;
  /** Milliseconds since the epoch; injectable so expiry can be tested without sleeping. */
  now?: () => number;
}

interface Payload {
  v: 1;
  m: TokenMethod;
  l: string;
  k: string;
  e: number;
  ct?: string;
  mx?: number;
  sz?: number;
  n?: string;
}

const MAX_TOKEN_CHARS = 8192;

/**
 * Tokens are `base64url(JSON payload).base64url(HMAC-SHA256(payload))`. Everything the token grants
 * (method, location, key, expiry, constraints, nonce) is inside the signed payload, so changing any of
 * it breaks the signature. Stateless by design: the only state (a used nonce) belongs to the caller.
 */
export class UrlTokenSigner {
  readonly #key: Buffer;
  readonly #now: () => number;

  constructor(options: TokenSignerOptions) {
    const secret = typeof options.signingKey === 'string' ? Buffer.from(options.signingKey) : options.signingKey;
    if (secret.byteLength < 32) throw new Error('blob signingKey must be at least 32 bytes');
    this.#key = createHmac('sha256', secret).update('nube/blob-url/v1').digest();
    this.#now = options.now ?? Date.now;
  }

  sign(grant: Omit<VerifiedToken, 'expiresAt' | 'nonce'> & { expiresInSeconds: number }): string {
    if (!Number.isInteger(grant.expiresInSeconds) || grant.expiresInSeconds <= 0) {
      throw new RangeError('expiresInSeconds must be a positive integer');
    }
    const payload: Payload = {
      v: 1,
      m: grant.method,
      l: grant.location,
      k: grant.key,
      e: Math.floor(this.#now() / 1000) + grant.expiresInSeconds,
    };
    if (grant.contentType !== undefined) payload.ct = grant.contentType;
    if (grant.maxBytes !== undefined) payload.mx = grant.maxBytes;
    if (grant.size !== undefined) payload.sz = grant.size;
    if (grant.method === 'PUT') payload.n = randomBytes(16).toString('base64url');
    const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
    return `${body}.${this.#mac(body).toString('base64url')}`;
  }

  /**
   * Signature first (constant time), expiry second: a forged token learns nothing about the clock.
   * A GET token also admits HEAD; a token signed for one method never admits the other.
   */
  verify(token: string, method: string): VerifiedToken {
    if (typeof token !== 'string' || token.length > MAX_TOKEN_CHARS) throw new BadSignature();
    const dot = token.indexOf('.');
    if (dot <= 0 || dot !== token.lastIndexOf('.')) throw new BadSignature();
    const body = token.slice(0, dot);
    const given = Buffer.from(token.slice(dot + 1), 'base64url');
    const expected = this.#mac(body);
    if (given.byteLength !== expected.byteLength || !timingSafeEqual(given, expected)) throw new BadSignature();
    let p: Payload;
    try {
      p = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Payload;
    } catch {
      throw new BadSignature();
    }
    if (p.v !== 1) throw new BadSignature('unsupported token version');
    const wanted = method === 'HEAD' ? 'GET' : method;
    if (p.m !== wanted) throw new BadSignature(`the signed URL is for ${p.m}, not ${method}`);
    if (Math.floor(this.#now() / 1000) >= p.e) throw new Expired();
    const out: VerifiedToken = { method: p.m, location: p.l, key: p.k, expiresAt: p.e };
    if (p.ct !== undefined) out.contentType = p.ct;
    if (p.mx !== undefined) out.maxBytes = p.mx;
    if (p.sz !== undefined) out.size = p.sz;
    if (p.n !== undefined) out.nonce = p.n;
    return out;
  }

  #mac(body: string): Buffer {
    return createHmac('sha256', this.#key).update(body).digest();
  }
}
