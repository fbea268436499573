// Every error body leaving nube has one shape, { error, code, issues? }, including those the HTTP layer
// produces itself: Fastify's router (malformed percent-encoding, a path segment past maxParamLength),
// its content-type parsing, and Node's HTTP parser, which fails before there is a request to answer
// (headers too large, a malformed request line, a request that takes too long to arrive). Node and
// Fastify would write their own `{ error: "Bad Request", message, statusCode }` there.
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { ApiError, errors } from './errors.js';

/** Fastify's own error codes, in nube's words. */
const FASTIFY_ERRORS: Record<string, () => ApiError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () => errors.payloadTooLarge(),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () =>
    errors.unsupportedMediaType('request bodies are JSON: send them with content-type: application/json'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => errors.badRequest('the body is not as long as its Content-Length says'),
  FST_ERR_BAD_URL: () => new ApiError(400, 'BadUrl', 'the URL is malformed (bad percent-encoding)'),
  FST_ERR_INVALID_URL: () => new ApiError(400, 'BadUrl', 'the URL is malformed'),
  FST_ERR_MAX_PARAM_LENGTH: () => new ApiError(414, 'UriTooLong', 'a path segment of the URL is too long'),
};

export function toApiError(err: FastifyError | ApiError): ApiError {
  if (err instanceof ApiError) return err;
  const code = (err as FastifyError).code;
  const status = (err as FastifyError).statusCode;
  const known = code ? FASTIFY_ERRORS[code] : undefined;
  if (known) return known();
  if (status === 413) return errors.payloadTooLarge();
  if (status === 415) return errors.unsupportedMediaType();
  if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err instanceof SyntaxError) {
    return errors.badRequest('malformed JSON body', [{ path: ['body'], message: err.message }], 'InvalidJson');
  }
  if (status && status >= 400 && status < 500) return new ApiError(status, 'BadRequest', err.message);
  return errors.internal();
}

/** Renders every failure as { error, code, issues? } and never leaks internals of a 5xx. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | ApiError, req, reply) => {
    const e = toApiError(err);
    if (e.status >= 500 && e.status !== 501 && e.status !== 503) {
      req.log.error({ err, reqId: req.id }, 'unexpected error');
    }
    return reply.code(e.status).headers(e.headers).send(e.toBody());
  });
}

/** Fastify's `frameworkErrors` option: errors its router raises before a route runs. */
export function frameworkErrors(err: FastifyError, _req: unknown, reply: FastifyReply): void {
  const e = toApiError(err);
  void reply.code(e.status).headers(e.headers).send(e.toBody());
}

/** A method token and a space: the packet is the start of the request. */
const REQUEST_START = /^[A-Z]{3,10} /;

/**
 * The server's `clientError` handler (Fastify's `clientErrorHandler` option). Node's parser counts the
 * request line and the headers together (maxHeaderSize, 16 KiB); when the packet that overflowed is the
 * start of the request and its first line is most of that, the URL is what was too long (414), else the
 * headers (431). A request split over many packets may report a long URL as 431: still the one shape.
 */
export function clientErrorHandler(err: ConnectionError, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  let e: ApiError;
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    e = new ApiError(408, 'RequestTimeout', 'the request took too long to arrive');
  } else if (err.code === 'HPE_HEADER_OVERFLOW') {
    // Node hands over the bytes it was parsing (Fastify's type says otherwise).
    const packet = Buffer.isBuffer(err.rawPacket) ? (err.rawPacket as Buffer) : undefined;
    const eol = packet?.indexOf('\r\n') ?? -1;
    const firstLine = packet && REQUEST_START.test(packet.subarray(0, 11).toString('latin1')) ? (eol < 0 ? packet.length : eol) : 0;
    e =
      firstLine > 8 * 1024
        ? new ApiError(414, 'UriTooLong', 'the URL is too long')
        : new ApiError(431, 'HeadersTooLarge', 'the request headers are too large');
  } else {
    e = new ApiError(400, 'BadRequest', 'malformed HTTP request');
  }
  // As Node does: answer unless a response on this connection has begun (it would be corrupted), then close.
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) {
    const body = JSON.stringify(e.toBody());
    socket.write(
      `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}
