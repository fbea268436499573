// Which OpenAI-compatible endpoint a completion goes to: the account's own AI key when it set one
// (a user-chosen URL: every connection goes through the outbound guard), else the operator's
// NUBE_LLM_BASE_URL (trusted configuration: it may be a loopback or private address, such as a model
// server beside nube, so it is not subject to the guard).
import { Agent, type Dispatcher } from 'undici';
import type { LlmConfig } from '../../config.js';
import { ApiError } from '../../platform/errors.js';
import { type AllowList, safeLookup } from '../../platform/outbound.js';

export interface Upstream {
  baseUrl: string;
  apiKey?: string;
  model: string;
  source: 'account' | 'operator';
  dispatcher: Dispatcher;
}

/** Where an account's AI key comes from (the account area's service). */
export type AccountKeySource = (ownerId: string) => Promise<{ baseUrl: string; apiKey: string; model: string } | undefined>;

export const llmNotConfigured = () =>
  new ApiError(
    503,
    'LlmNotConfigured',
    'no LLM upstream: the operator has not set NUBE_LLM_BASE_URL and this account has no AI key of its own (PUT /api/v2/account/ai-key)',
  );

const KEEP_ALIVE = { keepAliveTimeout: 30_000, connections: 64 } as const;

export class Upstreams {
  private readonly operatorAgent = new Agent(KEEP_ALIVE);
  private readonly guardedAgent: Agent;

  constructor(
    private readonly config: LlmConfig,
    private readonly accountKey: AccountKeySource,
    allow: AllowList,
  ) {
    this.guardedAgent = new Agent({ ...KEEP_ALIVE, connect: { lookup: safeLookup(allow) } });
  }

  /** The account's key (its URL re-checked by the account service) or the operator's; 503 when neither. */
  async for(ownerId: string): Promise<Upstream> {
    const own = await this.accountKey(ownerId);
    if (own) return { ...own, source: 'account', dispatcher: this.guardedAgent };
    const op = this.config.upstream;
    if (!op) throw llmNotConfigured();
    return { baseUrl: op.baseUrl, apiKey: op.apiKey, model: op.model, source: 'operator', dispatcher: this.operatorAgent };
  }

  async close(): Promise<void> {
    await Promise.all([this.operatorAgent.close(), this.guardedAgent.close()]);
  }
}
