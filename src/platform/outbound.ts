// The one owner of nube's outbound HTTP (ARCHITECTURE: "Outbound HTTP has one owner"). Every request to
// a host a user can choose (webhook endpoints, web fetch/crawl/extract, an account's AI endpoint) and to
// the services the operator configures (search provider, the operator's embeddings endpoint) goes
// through `OutboundClient.request`:
// - each hop's URL is checked before anything is sent (http(s) only, no credentials in the URL, IP
//   literals judged by the address rules of outbound-address.ts), and names are checked again at
//   connect time by the socket's `lookup` (`safeLookup`), so the address connected to is the one
//   checked (DNS rebinding);
// - redirects are followed by hand, only as many as the caller allows, each hop checked the same way;
//   credentials (authorization, cookie) never follow a redirect to another origin;
// - an operator-configured base URL may be named `trustedOrigin`: that origin alone is reached without
//   the address check (SearXNG or an embeddings server often runs on loopback); its redirects elsewhere
//   are checked like any other hop.
// The answer's body is a Node stream (undici's BodyReadable: `text()`, `json()`, async iteration), so a
// caller can cap what it reads or relay a stream (SSE) as it arrives.
// A test (test/platform/outbound-ownership.test.ts) fails when any other module under src/ opens
// outbound connections itself.
import type { IncomingHttpHeaders } from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import {
  type AllowList,
  assertPublicUrl,
  OutboundBlockedError,
  OutboundError,
  parseAllowList,
  type Resolver,
  safeLookup,
} from './outbound-address.js';
import { inSpan, SpanKind, tracingOn, withTraceContext } from './tracing.js';

export {
  type AllowList,
  assertPublicUrl,
  isAllowedAddress,
  isPublicAddress,
  OutboundBlockedError,
  OutboundError,
  type OutboundErrorCode,
  parseAllowList,
  safeLookup,
} from './outbound-address.js';

export interface OutboundInit {
  method?: Dispatcher.HttpMethod;
  headers?: Record<string, string>;
  /** Sent again on a 307/308 redirect, so it is a string or bytes, never a stream. */
  body?: string | Uint8Array;
  /** The caller's cancellation (a client that hung up); aborts the exchange and the body. */
  signal?: AbortSignal;
  /** One limit for the whole exchange, the body included (omit for long-lived streams such as SSE). */
  timeoutMs?: number;
  /** Redirects to follow, each hop checked (default 0: a 3xx comes back as the answer). */
  maxRedirects?: number;
  /** An operator-configured base URL whose origin is reached without the address check. */
  trustedOrigin?: string | URL;
  /**
   * PEM certificates to trust for the trusted origin's TLS instead of the system's (an operator's
   * test CA, such as pebble's for ACME); never used for any other origin.
   */
  trustedCa?: string;
  /** Send the W3C `traceparent` of this exchange's span when traces are on (webhook deliveries do). */
  propagateTrace?: boolean;
}

export type OutboundBody = Dispatcher.ResponseData['body'];

export interface OutboundResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** URL of the answer, after redirects. */
  url: string;
  body: OutboundBody;
  /** A header's value (the first, if repeated). */
  header(name: string): string | undefined;
  /** For an answer whose body is not wanted: drains a small body (the connection is reused), else drops it. */
  discard(): void;
}

export interface OutboundOptions {
  allow: AllowList | readonly string[];
  /** Name resolution (tests); the system resolver by default. */
  resolve?: Resolver;
  /** Connections kept per origin (default 64). */
  connections?: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];

export class OutboundClient {
  private readonly allow: AllowList;
  /** Connects only to addresses the rules allow (its `lookup` is safeLookup). */
  private readonly guarded: Agent;
  /** For the trusted origin only: plain lookup. */
  private readonly trusted: Agent;
  /** For the trusted origin with an operator's CA bundle: one pool per bundle. */
  private readonly trustedWithCa = new Map<string, Agent>();
  private readonly pool: { connections: number; keepAliveTimeout: number };

  constructor(opts: OutboundOptions) {
    this.allow = Array.isArray(opts.allow) ? parseAllowList(opts.allow as readonly string[]) : (opts.allow as AllowList);
    const pool = { connections: opts.connections ?? 64, keepAliveTimeout: 10_000 };
    this.pool = pool;
    this.guarded = new Agent({ ...pool, connect: { lookup: safeLookup(this.allow, opts.resolve) as never } });
    this.trusted = new Agent(pool);
  }

  /**
   * One request, redirects followed by hand up to `maxRedirects`, every hop checked. Throws
   * OutboundError (OutboundBlockedError when an address or URL is refused: nothing was sent to it).
   */
  request(input: string | URL, init: OutboundInit = {}): Promise<OutboundResponse> {
    if (!tracingOn()) return this.requestOnce(input, init);
    const host = URL.canParse(String(input)) ? new URL(input).hostname : '';
    return inSpan(`outbound ${init.method ?? 'GET'}`, { 'server.address': host }, () => this.requestOnce(input, init), SpanKind.CLIENT);
  }

  private async requestOnce(input: string | URL, init: OutboundInit): Promise<OutboundResponse> {
    const timeout = init.timeoutMs ? AbortSignal.timeout(init.timeoutMs) : undefined;
    const signal = timeout && init.signal ? AbortSignal.any([init.signal, timeout]) : (timeout ?? init.signal);
    const trusted = init.trustedOrigin ? new URL(init.trustedOrigin).origin : undefined;
    const max = init.maxRedirects ?? 0;
    let method: Dispatcher.HttpMethod = init.method ?? 'GET';
    let body = init.body;
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(init.headers ?? {})) headers[k.toLowerCase()] = v;
    if (init.propagateTrace) withTraceContext(headers);
    let url = String(input);
    let hop = 0;
    try {
      for (; ; hop++) {
        const { target, dispatcher } = await this.hop(url, trusted, init.trustedCa);
        const res = await dispatcher.request({
          origin: target.origin,
          path: target.pathname + target.search,
          method,
          headers,
          body: body ?? null,
          signal,
        });
        const location = res.headers.location;
        if (max === 0 || !REDIRECTS.has(res.statusCode) || typeof location !== 'string') {
          return response(res, target.href);
        }
        discard(res.body);
        if (hop >= max) throw new OutboundError('TooManyRedirects', `${String(input)} redirected more than ${max} times`);
        const next = parseLocation(location, target);
        if (next.origin !== target.origin) for (const h of CREDENTIAL_HEADERS) delete headers[h];
        // Fetch's rules: 303 turns anything but HEAD into GET; 301/302 turn POST into GET.
        if ((res.statusCode === 303 && method !== 'HEAD') || ((res.statusCode === 301 || res.statusCode === 302) && method === 'POST')) {
          method = 'GET';
          body = undefined;
          delete headers['content-type'];
          delete headers['content-length'];
        }
        url = next.href;
      }
    } catch (err) {
      const e = toOutboundError(err);
      // Refused before or at connect time; a redirect says where it was going.
      if (hop > 0 && e instanceof OutboundBlockedError) throw new OutboundBlockedError(`redirect to ${url} refused: ${e.message}`, e.address);
      throw e;
    }
  }

  /** The hop's URL, checked, and the connection pool that will check its address again at connect. */
  private async hop(url: string, trusted: string | undefined, ca?: string): Promise<{ target: URL; dispatcher: Agent }> {
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      throw new OutboundBlockedError('not a valid URL');
    }
    if (trusted !== undefined && target.origin === trusted) {
      if (ca === undefined) return { target, dispatcher: this.trusted };
      let agent = this.trustedWithCa.get(ca);
      if (!agent) {
        agent = new Agent({ ...this.pool, connect: { ca } });
        this.trustedWithCa.set(ca, agent);
      }
      return { target, dispatcher: agent };
    }
    const { url: checked } = await assertPublicUrl(target, this.allow, { dns: false });
    if (checked.username || checked.password) {
      throw new OutboundBlockedError('URLs carrying a user name or password are not fetched');
    }
    return { target: checked, dispatcher: this.guarded };
  }

  async close(): Promise<void> {
    await Promise.all([this.guarded.close(), this.trusted.close(), ...[...this.trustedWithCa.values()].map((a) => a.close())]);
  }
}

function parseLocation(location: string, base: URL): URL {
  try {
    return new URL(location, base);
  } catch {
    throw new OutboundError('OutboundFailed', `${base.href} redirected to an invalid URL`);
  }
}

/** Reads and drops up to 64 KiB so the connection can be reused; a longer body closes it. */
function discard(body: OutboundBody): void {
  body.dump({ limit: 64 * 1024 }).catch(() => {});
}

function response(res: Dispatcher.ResponseData, url: string): OutboundResponse {
  // A body dropped unread (destroy(), a consumer leaving early) emits an abort error; whoever reads the
  // body gets errors from the read itself, so an unread body's error must not crash the process.
  res.body.on('error', () => {});
  return {
    status: res.statusCode,
    headers: res.headers,
    url,
    body: res.body,
    header(name) {
      const v = res.headers[name.toLowerCase()];
      return Array.isArray(v) ? v[0] : v;
    },
    discard: () => discard(res.body),
  };
}

/**
 * Any failure of a request or of reading its body as an OutboundError: a refused address wherever it
 * surfaced (the connect-time `lookup` fails inside undici), a timeout (`timeoutMs` aborts with a
 * TimeoutError, undici's own header/body timeouts), the caller's abort, DNS and connection errors.
 */
export function toOutboundError(err: unknown): OutboundError {
  let e: unknown = err;
  for (let i = 0; i < 6 && e; i++) {
    if (e instanceof OutboundError) return e;
    const { code, name } = e as { code?: string; name?: string };
    if (name === 'TimeoutError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') {
      return new OutboundError('OutboundTimeout', 'no answer in time');
    }
    if (name === 'AbortError' || code === 'UND_ERR_ABORTED') return new OutboundError('OutboundAborted', 'the request was cancelled');
    // Node's own messages name the host and port (`connect ECONNREFUSED 1.2.3.4:443`): the caller chose them.
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NODATA') return new OutboundError('HostNotFound', (e as Error).message);
    if (code === 'ECONNREFUSED') return new OutboundError('ConnectionRefused', (e as Error).message);
    e = (e as { cause?: unknown }).cause;
  }
  const root = (err as { cause?: Error }).cause ?? (err as Error);
  return new OutboundError('OutboundFailed', root?.message || String(err));
}
