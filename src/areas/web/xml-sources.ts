// Sitemaps (sitemaps.org 0.9: `urlset` and `sitemapindex`) and feeds (RSS 2.0, RSS 1.0/RDF, Atom 1.0)
// read into items, with linkedom's XML parser; run in the parser processes (parser-main.ts), since a
// sitemap at the fetch cap takes a while to parse.
import { DOMParser } from 'linkedom';
import { absoluteLink } from './html.js';

export interface SitemapResult {
  /** Pages a `urlset` lists. */
  urls: { url: string; lastmod: string | null; changefreq: string | null; priority: number | null }[];
  /** Sitemaps a `sitemapindex` lists (read in turn by the caller). */
  sitemaps: string[];
}

export interface FeedItem {
  title: string | null;
  url: string | null;
  id: string | null;
  published: string | null;
  summary: string | null;
  author: string | null;
}

type Node = {
  localName: string;
  textContent: string | null;
  children: ArrayLike<Node>;
  getAttribute(n: string): string | null;
  getElementsByTagName(n: string): ArrayLike<Node>;
};

const kids = (n: Node, name: string): Node[] =>
  Array.from(n.children).filter((c) => c.localName.replace(/^.*:/, '') === name);
const text = (n: Node, ...names: string[]): string | null => {
  for (const name of names) {
    const t = kids(n, name)[0]?.textContent?.trim();
    if (t) return t;
  }
  return null;
};

function root(xml: string): Node {
  const doc = new DOMParser().parseFromString(xml, 'text/xml') as unknown as { documentElement: Node | null };
  if (!doc.documentElement) throw new Error('not an XML document');
  return doc.documentElement;
}

export function parseSitemap(xml: string, base: string): SitemapResult {
  const r = root(xml);
  const name = r.localName.replace(/^.*:/, '');
  if (name !== 'urlset' && name !== 'sitemapindex')
    throw new Error(`not a sitemap (its root element is <${r.localName}>, not <urlset> or <sitemapindex>)`);
  const out: SitemapResult = { urls: [], sitemaps: [] };
  for (const el of kids(r, name === 'urlset' ? 'url' : 'sitemap')) {
    const loc = absoluteLink(text(el, 'loc') ?? '', base);
    if (!loc) continue;
    if (name === 'sitemapindex') {
      out.sitemaps.push(loc);
      continue;
    }
    const p = Number(text(el, 'priority'));
    out.urls.push({
      url: loc,
      lastmod: text(el, 'lastmod'),
      changefreq: text(el, 'changefreq'),
      priority: text(el, 'priority') !== null && Number.isFinite(p) ? p : null,
    });
  }
  return out;
}

export function parseFeed(xml: string, base: string): { title: string | null; items: FeedItem[] } {
  const r = root(xml);
  const name = r.localName.replace(/^.*:/, '');
  if (name === 'feed') {
    return {
      title: text(r, 'title'),
      items: kids(r, 'entry').map((e) => {
        const links = kids(e, 'link');
        const link = links.find((l) => (l.getAttribute('rel') ?? 'alternate') === 'alternate') ?? links[0];
        const author = kids(e, 'author')[0];
        return {
          title: text(e, 'title'),
          url: link ? (absoluteLink(link.getAttribute('href') ?? '', base) ?? null) : null,
          id: text(e, 'id'),
          published: text(e, 'published', 'updated'),
          summary: text(e, 'summary', 'content'),
          author: author ? text(author, 'name') : null,
        };
      }),
    };
  }
  if (name === 'rss' || name === 'RDF') {
    const channel = kids(r, 'channel')[0];
    // RSS 2.0 keeps items in the channel; RSS 1.0 (RDF) beside it.
    const items = name === 'rss' ? (channel ? kids(channel, 'item') : []) : kids(r, 'item');
    return {
      title: channel ? text(channel, 'title') : null,
      items: items.map((i) => ({
        title: text(i, 'title'),
        url: absoluteLink(text(i, 'link') ?? '', base) ?? null,
        id: text(i, 'guid') ?? i.getAttribute('rdf:about'),
        published: text(i, 'pubDate', 'date'),
        summary: text(i, 'description', 'encoded'),
        author: text(i, 'author', 'creator'),
      })),
    };
  }
  throw new Error(`not a feed (its root element is <${r.localName}>, not <rss>, <rdf:RDF> or <feed>)`);
}
