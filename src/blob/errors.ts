/**
 * Typed errors of the blob layer. The files service maps them to `ApiError`s; `httpStatus` is the
 * status the HTTP layer should answer with when it serves a blob route directly (`/blob/<token>`).
 */
export type BlobErrorCode =
  | 'InvalidKey'
  | 'NotFound'
  | 'TooLarge'
  | 'SizeMismatch'
  | 'InvalidRange'
  | 'Expired'
  | 'BadSignature'
  | 'UnknownLocation'
  | 'Unsupported';

export class BlobError extends Error {
  readonly code: BlobErrorCode;
  readonly httpStatus: number;

  constructor(code: BlobErrorCode, httpStatus: number, message: string) {
    super(message);
    this.name = code;
    this.code = code;
    this.httpStatus = httpStatus;
  }
}

export class InvalidKey extends BlobError {
  constructor(message: string) {
    super('InvalidKey', 400, message);
  }
}

export class NotFound extends BlobError {
  constructor(key: string) {
    super('NotFound', 404, `no blob at key ${JSON.stringify(key)}`);
  }
}

export class TooLarge extends BlobError {
  readonly maxBytes: number;
  constructor(maxBytes: number) {
    super('TooLarge', 413, `body exceeds the limit of ${maxBytes} bytes`);
    this.maxBytes = maxBytes;
  }
}

export class SizeMismatch extends BlobError {
  readonly expected: number;
  readonly received: number;
  constructor(expected: number, received: number) {
    super('SizeMismatch', 400, `expected ${expected} bytes, received ${received}`);
    this.expected = expected;
    this.received = received;
  }
}

export class InvalidRange extends BlobError {
  readonly size: number;
  constructor(size: number, message = 'range not satisfiable') {
    super('InvalidRange', 416, message);
    this.size = size;
  }
}

export class Expired extends BlobError {
  constructor() {
    super('Expired', 403, 'the signed URL has expired');
  }
}

export class BadSignature extends BlobError {
  constructor(message = 'the signed URL is not valid') {
    super('BadSignature', 403, message);
  }
}

export class UnknownLocation extends BlobError {
  constructor(location: string) {
    super('UnknownLocation', 400, `no storage location named ${JSON.stringify(location)}`);
  }
}

export class Unsupported extends BlobError {
  constructor(message: string) {
    super('Unsupported', 400, message);
  }
}
