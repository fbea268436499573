// `render: true`: a page that needs JavaScript, read in Chromium (src/browser) with every request it
// makes (its own document, scripts, XHR, images) fetched by nube through the outbound guard, so a page
// cannot reach a private address through the browser; redirects come back to the browser and are
// checked again as new requests. One byte budget and one deadline per page; nothing kept between pages.
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Browser, PageAnswer, PageRequest } from '../../browser/index.js';
import { ApiError } from '../../platform/errors.js';
import type { OutboundClient } from '../../platform/outbound.js';
import { type FetchedPage, failure } from './fetcher.js';

/** Headers the browser sends that nube sets itself or that do not go past one hop. */
const DROP_REQUEST = new Set([
  'host',
  'connection',
  'accept-encoding',
  'content-length',
  'transfer-encoding',
  'keep-alive',
  'upgrade',
  'proxy-authorization',
]);
const DROP_ANSWER = new Set([
  'content-encoding',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
]);

function flat(h: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || DROP_ANSWER.has(k)) continue;
    out[k] = Array.isArray(v) ? v.join(k === 'set-cookie' ? '\n' : ', ') : v;
  }
  return out;
}

export class PageRenderer {
  constructor(
    private readonly browser: Browser,
    private readonly client: OutboundClient,
    private readonly timeoutMs: number,
    private readonly maxBytes: number,
  ) {}

  private async fetchFor(req: PageRequest, budget: number): Promise<PageAnswer> {
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    for (const [k, v] of Object.entries(req.headers))
      if (!DROP_REQUEST.has(k) && !k.startsWith(':')) headers[k] = v;
    const res = await this.client.request(req.url, {
      method: req.method as Dispatcher.HttpMethod,
      headers,
      body: req.body ?? undefined,
      timeoutMs: this.timeoutMs,
    });
    const parts: Buffer[] = [];
    let size = 0;
    for await (const c of res.body as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > budget) throw new Error('the page passed its byte budget');
      parts.push(c);
    }
    return { status: res.status, headers: flat(res.headers), body: Buffer.concat(parts) };
  }

  close(): Promise<void> {
    return this.browser.close();
  }

  async get(url: string): Promise<FetchedPage> {
    let main: { status: number; contentType: string | null } | undefined;
    let mainError: unknown;
    const r = await this.browser
      .render({
        url,
        timeoutMs: this.timeoutMs,
        maxBytes: this.maxBytes,
        fetch: async (req, budget) => {
          const first = main === undefined && mainError === undefined && req.url === url;
          try {
            const a = await this.fetchFor(req, budget);
            if (first) main = { status: a.status, contentType: a.headers['content-type'] ?? null };
            return a;
          } catch (e) {
            if (first) mainError = failure(e, url, this.timeoutMs);
            throw e;
          }
        },
      })
      .catch((e: Error) => {
        throw (
          mainError ??
          new ApiError(502, 'RenderFailed', `${url} could not be rendered: ${e.message.split('\n')[0]}`)
        );
      });
    if (mainError) throw mainError;
    return {
      requestedUrl: url,
      url: r.url,
      status: main?.status ?? 200,
      contentType: 'text/html; charset=utf-8',
      body: r.html,
      truncated: false,
    };
  }
}
