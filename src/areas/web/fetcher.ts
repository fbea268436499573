// One guarded GET of a user-given URL: undici's fetch on an Agent whose `lookup` is the outbound guard's
// safeLookup (a name is checked at connect time and the socket goes to the address checked), IP literals
// checked before each hop, redirects followed by hand so every hop is checked, a timeout covering the
// whole exchange, and a byte cap on the body (the rest is not read: the connection is dropped).
import { TextDecoder } from 'node:util';
import { Agent, fetch as undiciFetch } from 'undici';
import { ApiError, errors } from '../../platform/errors.js';
import { type AllowList, assertPublicUrl, OutboundBlockedError, safeLookup } from '../../platform/outbound.js';

export const MAX_REDIRECTS = 5;
const USER_AGENT = 'nube-web/1 (+https://github.com/nube)';

export interface FetchedPage {
  requestedUrl: string;
  /** URL after redirects. */
  url: string;
  status: number;
  contentType: string | null;
  body: string;
  /** The body passed the byte cap and was cut there. */
  truncated: boolean;
}

export interface FetchOptions {
  signal?: AbortSignal;
  /** Accept any content type (robots.txt); by default binary types answer 415. */
  anyType?: boolean;
}

/** text/*, HTML/XML/JSON and their +xml/+json kin, JavaScript: content we can hand back as text. */
export function isTextual(contentType: string | null): boolean {
  if (!contentType) return true;
  const t = contentType.split(';')[0]!.trim().toLowerCase();
  return (
    t.startsWith('text/') ||
    /^application\/(xhtml\+xml|xml|json|ld\+json|javascript|ecmascript|x-javascript|rss\+xml|atom\+xml)$/.test(t) ||
    /\+(xml|json)$/.test(t)
  );
}

export const isHtml = (contentType: string | null): boolean =>
  contentType === null || /^(text\/html|application\/xhtml\+xml)\b/i.test(contentType.trim());

/** The content type's charset when Node knows it, else UTF-8. */
function decoder(contentType: string | null): TextDecoder {
  const charset = /charset\s*=\s*"?([\w.:-]+)/i.exec(contentType ?? '')?.[1];
  try {
    return new TextDecoder(charset ?? 'utf-8');
  } catch {
    return new TextDecoder('utf-8');
  }
}

const upstream = (message: string, code: string) => new ApiError(502, code, message);

/** Error codes a failed fetch answers with; every one is an ApiError, never a 500. */
function failure(err: unknown, url: string, timeoutMs: number, timedOut: boolean): ApiError {
  if (err instanceof ApiError) return err;
  if (timedOut) return upstream(`${url} did not answer within ${timeoutMs} ms`, 'FetchTimeout');
  let e: unknown = err;
  for (let i = 0; i < 5 && e; i++) {
    if (e instanceof OutboundBlockedError || (e as { code?: string }).code === 'OutboundBlocked') {
      return errors.badRequest(`${url}: ${(e as Error).message}`, undefined, 'UrlRefused');
    }
    const code = (e as { code?: string }).code;
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return upstream(`${new URL(url).hostname} does not resolve`, 'HostNotFound');
    if (code === 'ECONNREFUSED') return upstream(`${url} refused the connection`, 'ConnectionRefused');
    e = (e as { cause?: unknown }).cause;
  }
  const root = (err as { cause?: Error }).cause ?? (err as Error);
  return upstream(`fetching ${url} failed: ${root?.message ?? String(err)}`, 'FetchFailed');
}

export class PageFetcher {
  private readonly agent: Agent;

  constructor(
    private readonly allow: AllowList,
    readonly timeoutMs: number,
    readonly maxBytes: number,
  ) {
    this.agent = new Agent({ connect: { lookup: safeLookup(allow) as never }, connections: 64, keepAliveTimeout: 10_000 });
  }

  async get(input: string, opts: FetchOptions = {}): Promise<FetchedPage> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    let url = input;
    try {
      for (let hop = 0; ; hop++) {
        const checked = await assertPublicUrl(url, this.allow, { dns: false });
        if (checked.url.username || checked.url.password) {
          throw errors.badRequest(`${url}: URLs carrying a user name or password are not fetched`, undefined, 'UrlRefused');
        }
        const res = await undiciFetch(checked.url, {
          dispatcher: this.agent,
          redirect: 'manual',
          signal,
          headers: {
            'user-agent': USER_AGENT,
            accept: 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5',
          },
        });
        const location = res.headers.get('location');
        if (res.status >= 300 && res.status < 400 && location) {
          await res.body?.cancel();
          if (hop >= MAX_REDIRECTS) throw upstream(`${input} redirected more than ${MAX_REDIRECTS} times`, 'TooManyRedirects');
          url = new URL(location, checked.url).href;
          continue;
        }
        const contentType = res.headers.get('content-type');
        if (!opts.anyType && !isTextual(contentType)) {
          await res.body?.cancel();
          throw new ApiError(415, 'UnsupportedContentType', `${url} is ${contentType}, not a text or HTML page`, { contentType });
        }
        const { text, truncated } = await this.readCapped(res.body, contentType);
        // No content type: text unless the start of the body holds NUL bytes, which text never does.
        if (!opts.anyType && contentType === null && text.slice(0, 1024).includes('\u0000')) {
          throw new ApiError(415, 'UnsupportedContentType', `${url} has no content type and its body is binary`, { contentType });
        }
        return { requestedUrl: input, url: checked.url.href, status: res.status, contentType, body: text, truncated };
      }
    } catch (err) {
      throw failure(err, url, this.timeoutMs, timeout.aborted);
    }
  }

  private async readCapped(body: ReadableStream<Uint8Array> | null, contentType: string | null): Promise<{ text: string; truncated: boolean }> {
    if (!body) return { text: '', truncated: false };
    const chunks: Uint8Array[] = [];
    let size = 0;
    let truncated = false;
    const reader = body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (size + value.length > this.maxBytes) {
        chunks.push(value.subarray(0, this.maxBytes - size));
        size = this.maxBytes;
        truncated = true;
        await reader.cancel();
        break;
      }
      chunks.push(value);
      size += value.length;
    }
    return { text: decoder(contentType).decode(Buffer.concat(chunks)), truncated };
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}
