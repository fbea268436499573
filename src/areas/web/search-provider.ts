// Search provider interface and its one implementation: a SearXNG instance's JSON API
// (`GET <base>/search?q=...&format=json`; the instance must list `json` in search.formats).
import { ApiError } from '../../platform/errors.js';
import { type OutboundClient, toOutboundError } from '../../platform/outbound.js';

export interface SearchQuery {
  query: string;
  engine?: string;
  country?: string;
  signal?: AbortSignal;
}

export interface ProviderResult {
  title: string;
  url: string;
  content: string;
  engine: string | null;
  publishedAt: string | null;
}

export interface SearchProvider {
  readonly name: string;
  search(q: SearchQuery): Promise<ProviderResult[]>;
}

/** Main language of a country, for SearXNG's `language=<lang>-<CC>`; others search without one. */
const COUNTRY_LANGUAGE: Record<string, string> = {
  ar: 'es', bo: 'es', br: 'pt', ca: 'en', cl: 'es', co: 'es', cr: 'es', cu: 'es', de: 'de', do: 'es',
  ec: 'es', es: 'es', fr: 'fr', gb: 'en', gt: 'es', hn: 'es', it: 'it', mx: 'es', ni: 'es', pa: 'es',
  pe: 'es', pt: 'pt', py: 'es', sv: 'es', us: 'en', uy: 'es', ve: 'es',
};

export function searxngLanguage(country: string | undefined): string | undefined {
  if (!country) return undefined;
  const cc = country.toLowerCase();
  const lang = COUNTRY_LANGUAGE[cc];
  return lang ? `${lang}-${cc.toUpperCase()}` : undefined;
}

interface SearxngAnswer {
  results?: { title?: unknown; url?: unknown; content?: unknown; engine?: unknown; publishedDate?: unknown }[];
}

const text = (v: unknown): string => (typeof v === 'string' ? v : '');

function isoOrNull(v: unknown): string | null {
  if (typeof v !== 'string' || v === '') return null;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : new Date(t).toISOString();
}

export class SearxngProvider implements SearchProvider {
  readonly name = 'searxng';
  constructor(
    private readonly client: OutboundClient,
    private readonly baseUrl: string,
    private readonly timeoutMs: number,
  ) {}

  async search(q: SearchQuery): Promise<ProviderResult[]> {
    const url = new URL(`${this.baseUrl}/search`);
    url.searchParams.set('q', q.query);
    url.searchParams.set('format', 'json');
    if (q.engine) url.searchParams.set('engines', q.engine);
    const language = searxngLanguage(q.country);
    if (language) url.searchParams.set('language', language);
    let body: SearxngAnswer;
    try {
      // The operator's instance may live on loopback (trusted origin); a redirect elsewhere is checked.
      const res = await this.client.request(url, {
        signal: q.signal,
        timeoutMs: this.timeoutMs,
        maxRedirects: 3,
        trustedOrigin: this.baseUrl,
        headers: { accept: 'application/json' },
      });
      if (res.status < 200 || res.status >= 300) {
        res.discard();
        const hint = res.status === 403 ? ' (is `json` listed in the instance\'s search.formats?)' : '';
        throw new ApiError(502, 'SearchProviderFailed', `search provider answered HTTP ${res.status}${hint}`);
      }
      body = (await res.body.json()) as SearxngAnswer;
    } catch (err) {
      if (err instanceof ApiError) throw err;
      const e = toOutboundError(err);
      const why = e.code === 'OutboundTimeout' ? `no answer within ${this.timeoutMs} ms` : e.message;
      throw new ApiError(502, 'SearchProviderFailed', `search provider failed: ${why}`);
    }
    if (!body || !Array.isArray(body.results)) {
      throw new ApiError(502, 'SearchProviderFailed', 'search provider answered without a results array');
    }
    return body.results
      .filter((r) => typeof r.url === 'string' && r.url !== '')
      .map((r) => ({
        title: text(r.title),
        url: text(r.url),
        content: text(r.content),
        engine: typeof r.engine === 'string' ? r.engine : null,
        publishedAt: isoOrNull(r.publishedDate),
      }));
  }
}
