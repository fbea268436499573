// The LLM gateway's service: picks the upstream, checks the plan's monthly LLM tokens before relaying,
// meters every completion into the `llmTokens` counter, issues and revokes scoped credentials, and
// runs the gateway listener sandboxes reach. Agents (and later fleet and documents) call it.
import type { PlanName } from '../../platform/plans.js';
import { errors } from '../../platform/errors.js';
import { PLANS } from '../../platform/plans.js';
import type { OutboundClient } from '../../platform/outbound.js';
import type { Usage } from '../../platform/usage.js';
import type { LlmCredentials } from './credentials.js';
import { GatewayServer, type HostNetwork } from './gateway.js';
import { type ChatBody, GatewayError, type RelayResult, type RelaySink, relayCompletion } from './relay.js';
import type { Upstreams } from './upstream.js';

export interface LlmServiceDeps {
  usage: Usage;
  upstreams: Upstreams;
  /** The one outbound client (the account's upstream guarded, the operator's as its trusted origin). */
  outbound: OutboundClient;
  credentials: LlmCredentials;
  planOf: (ownerId: string) => Promise<PlanName>;
  gatewayPort: number;
  /** The sandbox network's host side; absent where sandboxes are not available. */
  host?: HostNetwork;
  log: { warn(o: object, m: string): void };
}

/**
 * Who a completion is on behalf of, beyond its owner: the scoped key that started the work (a document's
 * pages, a web schema fill), or the gateway credential's subject (`agent:<id>`), whose running turns
 * say which keys started them (the agents area answers that: `keysOf`).
 */
export interface MeterFor {
  keyId?: string | null;
  subject?: string;
}

export class LlmService {
  private gateway: Promise<GatewayServer> | undefined;
  /** Set by the area that issues credentials for a subject: the keys whose work that subject does now. */
  private keysOf: ((subject: string) => Promise<string[]>)[] = [];

  constructor(private readonly d: LlmServiceDeps) {}

  /** 402 InsufficientBalance once the month's tokens are spent (Byte includes none). */
  async assertBalance(ownerId: string, planName?: PlanName): Promise<{ allowance: number; used: number }> {
    const plan = PLANS[planName ?? (await this.d.planOf(ownerId))];
    const allowance = plan.llmTokensPerMonth ?? 0;
    const used = await this.d.usage.counter(ownerId, 'llmTokens');
    if (used >= allowance) {
      throw errors.paymentRequired(
        plan.llmTokensPerMonth === null
          ? `the ${plan.title} plan includes no LLM tokens for agents`
          : `the ${plan.title} plan's ${allowance} LLM tokens for this month are used up (${used} used)`,
        'InsufficientBalance',
        { limit: allowance, used },
      );
    }
    return { allowance, used };
  }

  /** For agent creation: an upstream exists (503 LlmNotConfigured naming the setting) and tokens are left. */
  async assertReady(ownerId: string, plan: PlanName): Promise<void> {
    await this.d.upstreams.for(ownerId);
    await this.assertBalance(ownerId, plan);
  }

  /** A gateway credential for `subject`; `address`: the one source address (a sandbox's) it is taken from. */
  issueCredential(ownerId: string, subject: string, address: string | null): Promise<string> {
    return this.d.credentials.issue(ownerId, subject, address);
  }

  revokeCredential(subject: string): Promise<void> {
    return this.d.credentials.revoke(subject);
  }

  resolveCredential(secret: string) {
    return this.d.credentials.resolve(secret);
  }

  /**
   * One completion for an owner: balance checked first, relayed, then its tokens counted. Errors
   * before the first byte are GatewayErrors (402, 503, upstream failures); the sink gets the answer.
   */
  async complete(ownerId: string, body: ChatBody, sink: RelaySink, signal?: AbortSignal, meter: MeterFor = {}): Promise<RelayResult> {
    // Whose turn this is, read as the call starts: the turn that made it may be marked done by the time
    // its tokens are counted.
    const keys = this.keysFor(meter);
    // The balance and the upstream are looked up at once: both are on the path to the first token.
    const [balance, upstream] = await Promise.allSettled([this.assertBalance(ownerId), this.d.upstreams.for(ownerId)]);
    if (balance.status === 'rejected') throw new GatewayError(402, 'InsufficientBalance', (balance.reason as Error).message);
    if (upstream.status === 'rejected') {
      const err = upstream.reason as { status?: number; code?: string; message: string };
      throw new GatewayError(err.status ?? 503, err.code ?? 'LlmNotConfigured', err.message);
    }
    const up = upstream.value;
    return relayCompletion(this.d.outbound, up, body, sink, signal, async (u) => {
      const n = u.promptTokens + u.completionTokens;
      if (n > 0) await Promise.all([this.d.usage.add(ownerId, 'llmTokens', n), ...(await keys).map((k) => this.d.usage.addToKey(k, 'llmTokens', n))]);
    });
  }

  /** Answers, for a credential's subject, the scoped keys whose turns it runs now (see MeterFor). */
  attributeSubjects(keysOf: (subject: string) => Promise<string[]>): void {
    this.keysOf.push(keysOf);
  }

  /**
   * The keys a completion's tokens are counted under too (`key:<id>`, their llmTokens caps). A subject's
   * completion during turns two keys started at once counts toward both: a cap errs on the side of the limit.
   */
  private async keysFor(meter: MeterFor): Promise<string[]> {
    const keys = new Set<string>(meter.keyId ? [meter.keyId] : []);
    try {
      if (meter.subject) for (const f of this.keysOf) for (const k of await f(meter.subject)) keys.add(k);
    } catch (e) {
      this.d.log.warn({ err: e, subject: meter.subject }, 'could not read which keys a completion is for');
    }
    return [...keys];
  }

  /** The model completions of this owner run on. */
  async modelFor(ownerId: string): Promise<string> {
    return (await this.d.upstreams.for(ownerId)).model;
  }

  /** The gateway's base URL for sandboxes (`http://<bridge host address>:<port>/v1`), started on first use. */
  async gatewayUrl(): Promise<string> {
    if (!this.d.host) throw errors.unavailable('the LLM gateway needs the sandbox network, which this nube does not have');
    this.gateway ??= GatewayServer.start(this, this.d.host, this.d.gatewayPort).catch((e: unknown) => {
      this.gateway = undefined;
      throw e;
    });
    const g = await this.gateway;
    await g.reassert().catch((e: unknown) => this.d.log.warn({ err: e }, 'could not re-open the LLM gateway port'));
    return g.url;
  }

  async close(): Promise<void> {
    const g = await this.gateway?.catch(() => undefined);
    await g?.close();
  }
}
