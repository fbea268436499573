// Entry point of a parser process (spawned by parser-pool.ts): HTML to Markdown and structured data
// off nube's event loop. One request at a time over the IPC channel; exits when nube goes away.
import { parsePage, parseStructured } from './html.js';
import { parseFeed, parseSitemap } from './xml-sources.js';
import type { ParseRequest, ParseResponse } from './parser-pool.js';

process.on('message', (msg: ParseRequest) => {
  let res: ParseResponse;
  try {
    const result =
      msg.kind === 'page'
        ? parsePage(msg.html, msg.url, msg.markdown)
        : msg.kind === 'structured'
          ? parseStructured(msg.html, msg.url)
          : msg.kind === 'sitemap'
            ? parseSitemap(msg.xml, msg.url)
            : parseFeed(msg.xml, msg.url);
    res = { id: msg.id, ok: true, result };
  } catch (err) {
    res = { id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) };
  }
  process.send?.(res);
});
process.on('disconnect', () => process.exit(0));
process.send?.({ ready: true } satisfies ParseResponse);
