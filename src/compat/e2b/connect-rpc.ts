// Connect RPC with the JSON codec, the part E2B's envd clients use (@connectrpc/connect-web with
// useBinaryFormat: false): unary calls are a plain JSON body and answer; server-streaming calls carry
// one enveloped request (flags byte, big-endian uint32 length, JSON) and answer a stream of envelopes
// ended by an end-of-stream envelope (flag 0x02) holding `{}` or `{"error": {code, message}}`.
import type { ServerResponse } from 'node:http';

export type ConnectCode =
  | 'canceled'
  | 'unknown'
  | 'invalid_argument'
  | 'deadline_exceeded'
  | 'not_found'
  | 'already_exists'
  | 'permission_denied'
  | 'resource_exhausted'
  | 'failed_precondition'
  | 'unimplemented'
  | 'internal'
  | 'unavailable'
  | 'unauthenticated';

const HTTP_STATUS: Record<ConnectCode, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  unauthenticated: 401,
};

export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
    this.name = 'ConnectError';
  }
}

const END_STREAM = 0x02;
const COMPRESSED = 0x01;

/** The one message of a server-streaming request. */
export function readEnvelope(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectError('invalid_argument', 'missing request envelope');
  if (body[0]! & COMPRESSED) throw new ConnectError('unimplemented', 'compressed messages are not supported');
  const len = body.readUInt32BE(1);
  if (body.length < 5 + len) throw new ConnectError('invalid_argument', 'truncated request envelope');
  return parseJson(body.subarray(5, 5 + len));
}

export function parseJson(body: Buffer | undefined): unknown {
  if (!body || body.length === 0) return {};
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw new ConnectError('invalid_argument', 'request body is not JSON');
  }
}

function envelope(flags: number, msg: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(msg), 'utf8');
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

export function errorBody(e: ConnectError): { code: ConnectCode; message: string } {
  return { code: e.code, message: e.message };
}

export function sendUnary(res: ServerResponse, msg: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(msg));
}

export function sendUnaryError(res: ServerResponse, e: ConnectError): void {
  res.writeHead(HTTP_STATUS[e.code], { 'content-type': 'application/json' });
  res.end(JSON.stringify(errorBody(e)));
}

/** A server stream on a hijacked response: messages, then exactly one end. */
export class ServerStream {
  private ended = false;

  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'application/connect+json', 'cache-control': 'no-store' });
    res.flushHeaders();
  }

  get open(): boolean {
    return !this.ended && !this.res.destroyed;
  }

  send(msg: unknown): void {
    if (this.open) this.res.write(envelope(0, msg));
  }

  /** Ends the stream with no end message, as a connection to a machine that went away ends. */
  drop(): void {
    if (!this.open) return;
    this.ended = true;
    this.res.destroy();
  }

  end(error?: ConnectError): void {
    if (!this.open) return;
    this.ended = true;
    this.res.end(envelope(END_STREAM, error ? { error: errorBody(error) } : {}));
  }
}

/** Connect-Timeout-Ms, when the client set one. */
export function timeoutMs(header: string | string[] | undefined): number | undefined {
  const v = Number(Array.isArray(header) ? header[0] : header);
  return Number.isFinite(v) && v > 0 ? v : undefined;
}
