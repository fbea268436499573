// Which OpenAI-compatible endpoint a completion goes to: the account's own AI key when it set one
// (a user-chosen URL: every connection goes through the outbound guard), else the operator's
// NUBE_LLM_BASE_URL (trusted configuration: it may be a loopback or private address, such as a model
// server beside nube, so its origin is the request's `trustedOrigin`). Both go through the one
// outbound client (platform/outbound.ts).
import type { LlmConfig } from '../../platform/config-shape.js';
import { ApiError } from '../../platform/errors.js';

export interface Upstream {
  baseUrl: string;
  apiKey?: string;
  model: string;
  source: 'account' | 'operator';
  /** The operator's origin, reached without the address check; absent for an account's key. */
  trustedOrigin?: string;
}

/** Where an account's AI key comes from (the account area's service). */
export type AccountKeySource = (ownerId: string) => Promise<{ baseUrl: string; apiKey: string; model: string } | undefined>;

export const llmNotConfigured = () =>
  new ApiError(
    503,
    'LlmNotConfigured',
    'no LLM upstream: the operator has not set NUBE_LLM_BASE_URL and this account has no AI key of its own (PUT /api/v2/account/ai-key)',
  );

export class Upstreams {
  constructor(
    private readonly config: LlmConfig,
    private readonly accountKey: AccountKeySource,
  ) {}

  /** The account's key (its URL re-checked by the account service) or the operator's; 503 when neither. */
  async for(ownerId: string): Promise<Upstream> {
    const own = await this.accountKey(ownerId);
    if (own) return { ...own, source: 'account' };
    const op = this.config.upstream;
    if (!op) throw llmNotConfigured();
    return { baseUrl: op.baseUrl, apiKey: op.apiKey, model: op.model, source: 'operator', trustedOrigin: new URL(op.baseUrl).origin };
  }
}
