// One error catalogue: every error leaving nube is an ApiError rendered as { error, code?, issues? }.

export interface ErrorIssue {
  path: (string | number)[];
  message: string;
  code?: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  get issues(): ErrorIssue[] | undefined {
    return this.extra.issues as ErrorIssue[] | undefined;
  }

  toBody(): Record<string, unknown> {
    return { error: this.message, code: this.code, ...this.extra };
  }
}

export const errors = {
  badRequest: (message: string, issues?: ErrorIssue[], code = 'BadRequest') =>
    new ApiError(400, code, message, issues ? { issues } : {}),
  validation: (issues: ErrorIssue[]) =>
    new ApiError(400, 'ValidationError', 'invalid request', { issues }),
  upgradeRequired: (message = 'this operation is a WebSocket: connect with Upgrade: websocket') =>
    new ApiError(426, 'UpgradeRequired', message, {}, { upgrade: 'websocket' }),
  unauthorized: (message = 'missing or invalid credential') => new ApiError(401, 'Unauthorized', message),
  paymentRequired: (message: string, code = 'PaymentRequired', extra: Record<string, unknown> = {}) =>
    new ApiError(402, code, message, extra),
  forbidden: (message = 'forbidden', code = 'Forbidden', extra: Record<string, unknown> = {}) =>
    new ApiError(403, code, message, extra),
  notFound: (what = 'resource', code = 'NotFound') => new ApiError(404, code, `${what} not found`),
  methodNotAllowed: (allow: string[]) =>
    new ApiError(405, 'MethodNotAllowed', 'method not allowed', {}, { allow: allow.join(', ') }),
  conflict: (message: string, code = 'Conflict', extra: Record<string, unknown> = {}) =>
    new ApiError(409, code, message, extra),
  payloadTooLarge: (message = 'request body too large') => new ApiError(413, 'PayloadTooLarge', message),
  unsupportedMediaType: (message = 'unsupported content type') =>
    new ApiError(415, 'UnsupportedMediaType', message),
  tooManyRequests: (retryAfterSec: number) =>
    new ApiError(
      429,
      'RateLimited',
      'rate limit exceeded',
      { retryAfter: retryAfterSec },
      { 'retry-after': String(retryAfterSec) },
    ),
  internal: () => new ApiError(500, 'InternalError', 'internal error'),
  notImplemented: (what: string) =>
    new ApiError(501, 'NotImplemented', `${what} is not implemented yet in this nube release`),
  unavailable: (message: string, retryAfterSec?: number) =>
    new ApiError(
      503,
      'Unavailable',
      message,
      retryAfterSec ? { retryAfter: retryAfterSec } : {},
      retryAfterSec ? { 'retry-after': String(retryAfterSec) } : {},
    ),
};
