// One GET of a user-given URL through the platform's guarded client (every hop checked, see
// platform/outbound.ts), a time limit covering the whole exchange, and a byte cap on the body (the rest
// is not read: the connection is dropped).
import { TextDecoder } from 'node:util';
import { ApiError, errors } from '../../platform/errors.js';
import { type OutboundBody, type OutboundClient, toOutboundError } from '../../platform/outbound.js';

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
export function failure(err: unknown, url: string, timeoutMs: number): ApiError {
  if (err instanceof ApiError) return err;
  const e = toOutboundError(err);
  switch (e.code) {
    case 'OutboundBlocked':
      return errors.badRequest(`${url}: ${e.message}`, undefined, 'UrlRefused');
    case 'OutboundTimeout':
      return upstream(`${url} did not answer within ${timeoutMs} ms`, 'FetchTimeout');
    case 'HostNotFound':
      return upstream(`${hostOf(url)} does not resolve`, 'HostNotFound');
    case 'ConnectionRefused':
      return upstream(`${url} refused the connection`, 'ConnectionRefused');
    case 'TooManyRedirects':
      return upstream(e.message, 'TooManyRedirects');
    default:
      return upstream(`fetching ${url} failed: ${e.message}`, 'FetchFailed');
  }
}

function hostOf(url: string): string {
  try {
    return new URL(url).hostname;
  } catch {
    return url;
  }
}

export class PageFetcher {
  constructor(
    private readonly client: OutboundClient,
    readonly timeoutMs: number,
    readonly maxBytes: number,
  ) {}

  async get(input: string, opts: FetchOptions = {}): Promise<FetchedPage> {
    try {
      const res = await this.client.request(input, {
        signal: opts.signal,
        timeoutMs: this.timeoutMs,
        maxRedirects: MAX_REDIRECTS,
        headers: {
          'user-agent': USER_AGENT,
          accept: 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5',
        },
      });
      const contentType = res.header('content-type') ?? null;
      if (!opts.anyType && !isTextual(contentType)) {
        res.discard();
        throw new ApiError(415, 'UnsupportedContentType', `${res.url} is ${contentType}, not a text or HTML page`, { contentType });
      }
      const { text, truncated } = await this.readCapped(res.body, contentType);
      // No content type: text unless the start of the body holds NUL bytes, which text never does.
      if (!opts.anyType && contentType === null && text.slice(0, 1024).includes('\u0000')) {
        throw new ApiError(415, 'UnsupportedContentType', `${res.url} has no content type and its body is binary`, { contentType });
      }
      return { requestedUrl: input, url: res.url, status: res.status, contentType, body: text, truncated };
    } catch (err) {
      throw failure(err, input, this.timeoutMs);
    }
  }

  private async readCapped(body: OutboundBody, contentType: string | null): Promise<{ text: string; truncated: boolean }> {
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    for await (const chunk of body as AsyncIterable<Buffer>) {
      if (size + chunk.length > this.maxBytes) {
        chunks.push(chunk.subarray(0, this.maxBytes - size));
        size = this.maxBytes;
        truncated = true;
        // Leaving the loop destroys the stream: the rest is never read.
        break;
      }
      chunks.push(chunk);
      size += chunk.length;
    }
    return { text: decoder(contentType).decode(Buffer.concat(chunks)), truncated };
  }
}
