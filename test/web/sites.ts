// Local servers for the web tests: a small site (HTML, redirects, robots.txt, binary, huge and slow
// bodies) and a fake SearXNG speaking its JSON API. Both listen on 127.0.0.1, port 0.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Running {
  url: string;
  port: number;
  /** Paths (with query) requested so far. */
  hits: string[];
  close(): Promise<void>;
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse, base: string) => void): Promise<Running> {
  const hits: string[] = [];
  let base = '';
  const server: Server = createServer((req, res) => {
    hits.push(req.url ?? '');
    handler(req, res, base);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
  return {
    url: base,
    port,
    hits,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export const ARTICLE = 'Nube fetches pages through an SSRF guard and turns their main content into Markdown.';

const page = (title: string, body: string) =>
  `<!doctype html><html><head><title>${title}</title><meta name="description" content="About ${title}"></head>` +
  `<body><nav><a href="/">Home</a> <a href="/a">A</a></nav>${body}<footer>Footer text</footer></body></html>`;

const article = (heading: string, links: string) =>
  `<article><h1>${heading}</h1><p>${ARTICLE} ${'It keeps going with more words for the reader view. '.repeat(12)}</p>` +
  `<p>See <a href="${links}">the next page</a> and <strong>bold</strong> text.</p>` +
  '<ul><li>first item</li><li>second item</li></ul></article>';

/** The site: `/` links to /a, /private/x, /binary.png and an external host; /a -> /b -> /c. */
export function startSite(): Promise<Running> {
  return listen((req, res, base) => {
    const path = (req.url ?? '/').split('?')[0];
    const html = (status: number, body: string) => {
      res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
      res.end(body);
    };
    switch (path) {
      case '/':
        return html(
          200,
          page(
            'Home page',
            `${article('Welcome home', '/a')}<p><a href="/private/x">private</a> <a href="/binary.png">image</a> ` +
              '<a href="http://example.invalid/elsewhere">elsewhere</a> <a href="mailto:x@y.z">mail</a> <a href="/a#frag">A again</a></p>',
          ),
        );
      case '/a':
        return html(200, page('Page A', article('Page A heading', '/b')));
      case '/b':
        return html(200, page('Page B', article('Page B heading', '/c')));
      case '/c':
        return html(200, page('Page C', article('Page C heading', '/')));
      case '/private/x':
        return html(200, page('Private', article('Private heading', '/')));
      case '/missing':
        return html(404, page('Not found', '<p>Nothing here.</p>'));
      case '/robots.txt':
        res.writeHead(200, { 'content-type': 'text/plain' });
        return res.end('User-agent: other\nDisallow: /\n\nUser-agent: *\nDisallow: /private/\n');
      case '/text.txt':
        res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
        return res.end('plain text, passed through as is\n');
      case '/data.json':
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end('{"ok":true}');
      case '/binary.png':
        res.writeHead(200, { 'content-type': 'image/png' });
        return res.end(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]));
      case '/product':
        return html(
          200,
          '<!doctype html><html lang="es-MX"><head><title>Taza nube</title><link rel="canonical" href="/product?id=1">' +
            '<meta property="og:title" content="Taza"><meta property="og:image" content="https://img.example/t.png">' +
            '<meta name="twitter:card" content="summary"><meta name="description" content="Una taza">' +
            '<script type="application/ld+json">{"@context":"https://schema.org","@type":"Product","name":"Taza","offers":{"price":"99.00","priceCurrency":"MXN"}}</script>' +
            '<script type="application/ld+json">{broken</script></head><body><h1>Taza</h1><h2>Detalles</h2><p>Cerámica.</p></body></html>',
        );
      case '/untyped-binary':
        res.writeHead(200);
        return res.end(Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 0, 0, 1]));
      case '/untyped-html':
        res.writeHead(200);
        return res.end(page('Untyped', '<p>no content type</p>'));
      case '/redirect':
        res.writeHead(302, { location: '/a' });
        return res.end();
      case '/loop':
        res.writeHead(302, { location: '/loop' });
        return res.end();
      case '/to-metadata':
        res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' });
        return res.end();
      case '/to-loopback':
        // 127.0.0.2 is loopback too, but outside the tests' allow-list (127.0.0.1/32).
        res.writeHead(301, { location: `http://127.0.0.2:${new URL(base).port}/a` });
        return res.end();
      case '/huge': {
        // 64 MiB of text, written as fast as the reader takes it: nube must stop at its cap.
        res.writeHead(200, { 'content-type': 'text/plain' });
        const chunk = Buffer.alloc(64 * 1024, 'x');
        let left = 1024;
        const write = () => {
          while (left > 0) {
            left--;
            if (!res.write(chunk)) return void res.once('drain', write);
          }
          res.end();
        };
        res.on('close', () => {
          left = 0;
        });
        return write();
      }
      case '/slow': {
        const timer = setTimeout(() => html(200, page('Slow', '<p>late</p>')), 30_000);
        res.on('close', () => clearTimeout(timer));
        return;
      }
      default:
        return html(404, page('Not found', '<p>no such page</p>'));
    }
  });
}

/** SearXNG's `/search` JSON API (results as SearXNG shapes them); 403 unless format=json, as SearXNG does. */
export function startSearxng(): Promise<Running> {
  return listen((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname !== '/search') {
      res.writeHead(404);
      return res.end();
    }
    if (u.searchParams.get('format') !== 'json') {
      res.writeHead(403, { 'content-type': 'text/html' });
      return res.end('<h1>403 Forbidden</h1>');
    }
    const q = u.searchParams.get('q') ?? '';
    const engine = u.searchParams.get('engines') ?? 'duckduckgo';
    const result = (n: number) => ({
      url: `https://example.org/${encodeURIComponent(q)}/${n}`,
      title: `${q} result ${n}`,
      content: `Snippet ${n} about ${q}`,
      engine,
      parsed_url: ['https', 'example.org', `/${q}/${n}`, '', '', ''],
      template: 'default.html',
      engines: [engine],
      positions: [n],
      publishedDate: n === 1 ? '2025-03-04T05:06:07' : null,
      score: 1 / n,
      category: 'general',
    });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        query: q,
        number_of_results: 0,
        results: [result(1), result(2), result(3)],
        answers: [],
        corrections: [],
        infoboxes: [],
        suggestions: [],
        unresponsive_engines: [],
      }),
    );
  });
}
