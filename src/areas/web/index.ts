import { parseAllowList } from '../../platform/outbound.js';
import type { AreaModule } from '../area.js';
import { PageFetcher } from './fetcher.js';
import { webOperations } from './operations.js';
import { SearxngProvider } from './search-provider.js';
import { WebService } from './service.js';

export const webArea: AreaModule = {
  name: 'web',
  operations: webOperations,
  create(deps) {
    const { web } = deps.config;
    const fetcher = new PageFetcher(parseAllowList(deps.config.outboundAllow), web.timeoutMs, web.maxBytes);
    const search = web.searchUrl ? new SearxngProvider(web.searchUrl, web.timeoutMs) : undefined;
    const buy = () => web.buyUrl ?? `${deps.publicUrl()}/api/v2/account/usage`;
    return { web: new WebService(fetcher, search, deps.usage, buy) };
  },
  async close(services) {
    await services.web.close();
  },
};
