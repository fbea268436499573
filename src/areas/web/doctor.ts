// `nube doctor` check for web search: the configured SearXNG instance answers a real query in JSON.
import type { Config } from '../../platform/config-shape.js';
import { type DoctorCheck, errorText, ok, skip, warn } from '../../platform/doctor.js';
import { OutboundClient } from '../../platform/outbound.js';
import { SearxngProvider } from './search-provider.js';

export function webChecks(config: Config): DoctorCheck[] {
  const { searchUrl, timeoutMs } = config.web;
  return [
    {
      name: 'web search',
      async run() {
        if (!searchUrl) return skip('NUBE_WEB_SEARCH_URL unset: POST /web/search answers 503 SearchNotConfigured');
        const client = new OutboundClient({ allow: config.outboundAllow });
        try {
          const results = await new SearxngProvider(client, searchUrl, timeoutMs).search({ query: 'nube' });
          return ok(`SearXNG at ${searchUrl}: answered a query with ${results.length} results`);
        } catch (e) {
          // Search failing leaves the rest of nube working: a warning, not a failure.
          return warn(
            `SearXNG at ${searchUrl}: ${errorText(e)}`,
            'start the instance, correct NUBE_WEB_SEARCH_URL, and list `json` in its settings.yml search.formats',
          );
        } finally {
          await client.close();
        }
      },
    },
  ];
}
