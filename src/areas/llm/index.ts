import type { AreaModule } from '../area.js';
import { LlmCredentials, llmMigrations } from './credentials.js';
import { LlmService } from './service.js';
import { Upstreams } from './upstream.js';

declare module '../../platform/operation.js' {
  interface Services {
    llm: LlmService;
  }
}

/**
 * The LLM gateway: no API operations of its own (it speaks OpenAI's protocol on its own listener, to
 * sandboxes); other areas call its service. Needs the account service (AI keys, plans) and the
 * sandboxes service (the bridge it listens on), so it comes after both.
 */
export const llmArea: AreaModule = {
  name: 'llm',
  operations: [],
  migrations: llmMigrations,
  create(deps, other) {
    const account = other.account!;
    const upstreams = new Upstreams(deps.config.llm, (ownerId) => account.aiKeyFor(ownerId));
    const llm = new LlmService({
      usage: deps.usage,
      upstreams,
      outbound: deps.outbound,
      credentials: new LlmCredentials(deps.store.db, deps.config.authCacheMs),
      planOf: (ownerId) => account.planOf(ownerId),
      gatewayPort: deps.config.llm.gatewayPort,
      host: other.sandboxes?.hostNetwork,
      log: deps.log,
    });
    return { llm };
  },
  async close(services) {
    await services.llm.close();
  },
};
