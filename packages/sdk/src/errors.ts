/** One validation issue of a 400 answer: where and what. */
export interface Issue {
  path: (string | number)[];
  message: string;
  code?: string;
}

export interface ErrorDetails {
  status: number;
  code?: string;
  issues?: Issue[];
  requestId?: string;
  /** The parsed error body (`{ error, code?, issues?, ... }`) or the raw text when it was not JSON. */
  body?: unknown;
  operationId?: string;
}

/** Base of every error the SDK throws; `status` 0 means no HTTP answer (network or timeout). */
export class NubeError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  readonly issues: Issue[];
  readonly requestId: string | undefined;
  readonly body: unknown;
  readonly operationId: string | undefined;

  constructor(message: string, details: ErrorDetails) {
    super(details.requestId ? `${message} (request id ${details.requestId})` : message);
    this.name = new.target.name;
    this.status = details.status;
    this.code = details.code;
    this.issues = details.issues ?? [];
    this.requestId = details.requestId;
    this.body = details.body;
    this.operationId = details.operationId;
  }
}

/** 401: the credential is missing, malformed or revoked. */
export class AuthenticationError extends NubeError {}
/** 402: the plan or balance does not cover this. */
export class PaymentRequiredError extends NubeError {}
/** 403: the credential may not do this. */
export class ForbiddenError extends NubeError {}
/** 404: absent, or owned by another account. */
export class NotFoundError extends NubeError {}
/** 400: params, query or body failed validation; see `issues`. */
export class ValidationError extends NubeError {}
/** 409: the resource's state does not allow this now. */
export class ConflictError extends NubeError {}
/** 429: too many requests; wait `retryAfter` seconds. */
export class RateLimitError extends NubeError {
  constructor(
    message: string,
    details: ErrorDetails,
    readonly retryAfter: number | undefined,
  ) {
    super(message, details);
  }
}
/** 501: the server knows the operation but does not implement it yet. */
export class NotImplementedError extends NubeError {}
/** 5xx: the server failed; retrying later may help. */
export class ServerError extends NubeError {}
/** 503: busy or not ready at this instant (a full fleet, a service still starting); wait `retryAfter` seconds. */
export class ServiceUnavailableError extends ServerError {
  constructor(
    message: string,
    details: ErrorDetails,
    readonly retryAfter: number | undefined,
  ) {
    super(message, details);
  }
}
/** The request did not finish within timeoutMs. */
export class TimeoutError extends NubeError {}
/** No HTTP answer at all: connection refused, DNS, TLS, reset. */
export class ConnectionError extends NubeError {}

/**
 * Seconds to wait, from a Retry-After header (delay in seconds or an HTTP date) or else a `retryAfter`
 * number in the body (nube's 503 for a full fleet carries it there).
 */
export function retryAfterSeconds(headers: Headers, body: unknown): number | undefined {
  const header = headers.get('retry-after')?.trim();
  if (header) {
    if (/^\d+(\.\d+)?$/.test(header)) return Number(header);
    const at = Date.parse(header);
    if (Number.isFinite(at)) return Math.max(0, Math.ceil((at - Date.now()) / 1000));
  }
  const fromBody = (body as { retryAfter?: unknown } | undefined)?.retryAfter;
  return typeof fromBody === 'number' && Number.isFinite(fromBody) && fromBody >= 0 ? fromBody : undefined;
}

const formatIssues = (issues: Issue[]) =>
  issues.map((i) => `  - ${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('\n');

/** Turns a non-2xx answer into the matching error, with a message that says what to do. */
export function errorFromResponse(
  operationId: string,
  status: number,
  body: unknown,
  headers: Headers,
): NubeError {
  const b = (body && typeof body === 'object' ? body : {}) as {
    error?: unknown;
    code?: unknown;
    issues?: unknown;
  };
  const serverMessage = typeof b.error === 'string' ? b.error : typeof body === 'string' && body ? body : '';
  const details: ErrorDetails = {
    status,
    ...(typeof b.code === 'string' ? { code: b.code } : {}),
    ...(Array.isArray(b.issues) ? { issues: b.issues as Issue[] } : {}),
    ...(headers.get('x-request-id') ? { requestId: headers.get('x-request-id')! } : {}),
    body,
    operationId,
  };
  const said = serverMessage ? `: ${serverMessage}` : '';
  const op = `${operationId} failed with ${status}${said}`;
  switch (status) {
    case 400: {
      const list = details.issues?.length ? `\n${formatIssues(details.issues)}` : '';
      return new ValidationError(`${op}. Fix the request and send it again.${list}`, details);
    }
    case 401:
      return new AuthenticationError(
        `${op}. The API key was refused: check NUBE_API_KEY / the apiKey option (it looks like nube_sk_live_...), and that the key has not been revoked.`,
        details,
      );
    case 402:
      return new PaymentRequiredError(
        `${op}. Your plan or balance does not cover this: upgrade the plan or top up.`,
        details,
      );
    case 403:
      return new ForbiddenError(
        `${op}. This credential may not do this; use the owner API key or a plan that allows it.`,
        details,
      );
    case 404:
      return new NotFoundError(
        `${op}. Check the id: it does not exist, was deleted, or belongs to another account.`,
        details,
      );
    case 409:
      return new ConflictError(
        `${op}. The resource's current state does not allow this; read it again and retry.`,
        details,
      );
    case 429: {
      const retryAfter = retryAfterSeconds(headers, body);
      const wait = retryAfter !== undefined ? `wait ${retryAfter} s` : 'wait a moment';
      return new RateLimitError(`${op}. Rate limited: ${wait} before retrying.`, details, retryAfter);
    }
    case 503: {
      const retryAfter = retryAfterSeconds(headers, body);
      const wait = retryAfter !== undefined ? `retry in ${retryAfter} s` : 'retry in a moment';
      return new ServiceUnavailableError(
        `${op}. The server is busy or not ready: ${wait}.`,
        details,
        retryAfter,
      );
    }
    case 501:
      return new NotImplementedError(
        `${op}. This nube server does not implement ${operationId} yet; upgrade the server or use another operation.`,
        details,
      );
    default:
      if (status >= 500) {
        return new ServerError(
          `${op}. The server failed; retry later, and report the request id if it persists.`,
          details,
        );
      }
      return new NubeError(`${op}.`, details);
  }
}
