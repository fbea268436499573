import type { PlanName } from '../../platform/plans.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { SCHEMES } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import { PLANS } from '../../platform/plans.js';
import { currentPeriod, type Usage } from '../../platform/usage.js';
import { assertPublicUrl, OutboundBlockedError } from '../../platform/outbound.js';
import type { AiKey, AiKeys, AiKeyView } from './ai-key.js';
import type { AccountRepo, AccountRow, KeyRow } from './repo.js';

export interface CreatedKey {
  key: KeyRow;
  /** The secret itself: shown once, never stored. */
  secret: string;
}

export function generateOwnerKey(): string {
  return SCHEMES.owner.prefix + randomToken(40, BASE62);
}

export class AccountService {
  // Resolved keys are cached briefly, keyed by the credential itself, so an authenticated request costs
  // neither a hash nor a store round trip; revocation clears this process's cache at once and other
  // replicas' within authCacheMs. Account rows are cached the same way for GET /account.
  private readonly cache = new Map<string, { principal: Principal; hash: string; until: number }>();
  private readonly accounts = new Map<string, { row: AccountRow; until: number }>();

  constructor(
    private readonly repo: AccountRepo,
    private readonly usage: Usage,
    private readonly authCacheMs: number,
    private readonly aiKeys?: AiKeys,
    private readonly outboundAllow: readonly string[] = [],
  ) {}

  // The AI key per account as last read (and its URL checked), for authCacheMs: the LLM gateway asks for
  // it on every completion. Setting or removing a key clears this process's entry at once.
  private readonly aiKeyCache = new Map<string, { key: AiKey | undefined; until: number }>();

  /** Sets the account's own AI key after checking its endpoint is a public address (or allowed). */
  async setAiKey(p: Principal, k: AiKey): Promise<AiKeyView> {
    await this.checkAiUrl(k.baseUrl);
    this.aiKeyCache.delete(p.ownerId);
    return this.requireAiKeys().set(p.ownerId, k);
  }

  aiKeyView(p: Principal): Promise<AiKeyView> {
    return this.requireAiKeys().view(p.ownerId);
  }

  async removeAiKey(p: Principal): Promise<void> {
    this.aiKeyCache.delete(p.ownerId);
    await this.requireAiKeys().remove(p.ownerId);
  }

  /** The account's AI key for a call made on its behalf, endpoint re-checked (DNS may have changed). */
  async aiKeyFor(ownerId: string): Promise<AiKey | undefined> {
    const hit = this.aiKeyCache.get(ownerId);
    if (hit && hit.until > Date.now()) return hit.key;
    const k = await this.aiKeys?.get(ownerId);
    if (k) await this.checkAiUrl(k.baseUrl);
    if (this.authCacheMs > 0) {
      if (this.aiKeyCache.size > 10_000) this.aiKeyCache.clear();
      this.aiKeyCache.set(ownerId, { key: k, until: Date.now() + this.authCacheMs });
    }
    return k;
  }

  private async checkAiUrl(url: string): Promise<void> {
    try {
      await assertPublicUrl(url, this.outboundAllow);
    } catch (e) {
      const why = e instanceof OutboundBlockedError ? e.message : `cannot resolve it (${(e as Error).message})`;
      throw errors.badRequest(`the AI key's baseUrl is refused: ${why}`, [{ path: ['body', 'baseUrl'], message: why }], 'UrlRefused');
    }
  }

  private requireAiKeys(): AiKeys {
    if (!this.aiKeys) throw new Error('AI keys are not wired');
    return this.aiKeys;
  }

  async createAccount(input: { name: string; plan: PlanName; keyValue?: string }): Promise<{ account: AccountRow } & CreatedKey> {
    const account: AccountRow = { id: newId('acct'), name: input.name, plan: input.plan, createdAt: Date.now() };
    await this.repo.insertAccount(account);
    const created = await this.createKey(account.id, 'default', input.keyValue);
    return { account, ...created };
  }

  async createKey(accountId: string, name: string, value = generateOwnerKey()): Promise<CreatedKey> {
    if (!(await this.repo.getAccount(accountId))) throw errors.notFound('account');
    const hash = sha256Hex(value);
    const key: KeyRow = { id: newId('key'), accountId, name, preview: `${value.slice(0, 17)}…`, createdAt: Date.now(), revokedAt: null };
    await this.repo.insertKey({ ...key, lookup: hash.slice(0, 16), hash });
    return { key, secret: value };
  }

  listKeys(accountId?: string): Promise<KeyRow[]> {
    return this.repo.listKeys(accountId);
  }

  listAccounts(): Promise<AccountRow[]> {
    return this.repo.listAccounts();
  }

  /** Revokes a key; with `accountId` only that account's key (another owner's key is a 404). */
  async revokeKey(id: string, accountId?: string): Promise<void> {
    const hash = await this.repo.revokeKey(id, accountId, Date.now());
    if (!hash) throw errors.notFound('key');
    for (const [credential, entry] of this.cache) if (entry.hash === hash) this.cache.delete(credential);
  }

  /** On an empty store, creates the owner account; returns the key to print once (undefined if preset). */
  async bootstrapOwner(plan: PlanName, presetKey?: string): Promise<{ created: boolean; printKey?: string }> {
    // Replicas starting at once on an empty store would all count none: one at a time.
    return this.repo.exclusive(async () => {
      if ((await this.repo.countAccounts()) > 0) return { created: false };
      const { secret } = await this.createAccount({ name: 'owner', plan, keyValue: presetKey });
      return { created: true, printKey: presetKey ? undefined : secret };
    });
  }

  readonly ownerKeyResolver: CredentialResolver = {
    scheme: 'owner',
    // Synchronous on a cache hit, so an authenticated request awaits nothing before its handler.
    resolve: (credential) => {
      const hit = this.cache.get(credential);
      if (hit && hit.until > Date.now()) return hit.principal;
      return this.resolveOwnerKey(credential);
    },
  };

  private async resolveOwnerKey(credential: string): Promise<Principal | null> {
    const now = Date.now();
    this.cache.delete(credential);
    const hash = sha256Hex(credential);
    const rows = await this.repo.keysByLookup(hash.slice(0, 16));
    const row = rows.find((r) => safeEqual(r.hash, hash));
    if (!row) return null;
    const principal: Principal = { scheme: 'owner', ownerId: row.accountId, plan: row.plan as PlanName, credentialId: row.id };
    if (this.authCacheMs > 0) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(credential, { principal, hash, until: now + this.authCacheMs });
    }
    return principal;
  }

  /** The account row, synchronously while cached (GET /account then awaits nothing). */
  private account(id: string): AccountRow | Promise<AccountRow> {
    const hit = this.accounts.get(id);
    if (hit && hit.until > Date.now()) return hit.row;
    return this.loadAccount(id);
  }

  private async loadAccount(id: string): Promise<AccountRow> {
    const now = Date.now();
    const row = await this.repo.getAccount(id);
    if (!row) throw errors.notFound('account');
    if (this.authCacheMs > 0) this.accounts.set(id, { row, until: now + this.authCacheMs });
    return row;
  }

  /** The account's plan, for work done on its behalf without a request (the LLM gateway). */
  /** The owner a key (by id) stands for while it is not revoked, or null: the console's sessions end with their key. */
  async principalOfKey(keyId: string): Promise<Principal | null> {
    const row = await this.repo.liveKey(keyId);
    return row ? { scheme: 'owner', ownerId: row.accountId, plan: row.plan as PlanName, credentialId: keyId } : null;
  }

  async planOf(ownerId: string): Promise<PlanName> {
    return (await this.account(ownerId)).plan as PlanName;
  }

  getAccount(p: Principal) {
    const a = this.account(p.ownerId);
    return a instanceof Promise ? a.then((row) => accountView(row, p)) : accountView(a, p);
  }

  async getUsage(p: Principal) {
    const plan = PLANS[p.plan];
    const [storage, databases, boxes, agents, aiCredits, llmTokens, webQueries] = await Promise.all([
      this.usage.gauge('storageBytes', p.ownerId),
      this.usage.gauge('databases', p.ownerId),
      this.usage.gauge('boxes', p.ownerId),
      this.usage.gauge('agents', p.ownerId),
      this.usage.counter(p.ownerId, 'aiCredits'),
      this.usage.counter(p.ownerId, 'llmTokens'),
      this.usage.counter(p.ownerId, 'webQueries'),
    ]);
    const item = (used: number, limit: number | null) => ({ used, limit, remaining: limit === null ? null : Math.max(0, limit - used) });
    return {
      plan: plan.name,
      period: currentPeriod(),
      storageBytes: item(storage, plan.storageBytes),
      aiCredits: item(aiCredits + webQueries, plan.aiCreditsPerMonth),
      llmTokens: item(llmTokens, plan.llmTokensPerMonth),
      databases: item(databases, plan.databases),
      boxes: item(boxes, plan.boxes),
      simultaneousAgents: item(agents, plan.simultaneousAgents),
      sessionSeconds: plan.sessionSeconds,
      trashRetentionDays: plan.trashRetentionDays,
    };
  }

  async getLlmBalance(p: Principal) {
    const plan = PLANS[p.plan];
    const used = await this.usage.counter(p.ownerId, 'llmTokens');
    const allowance = plan.llmTokensPerMonth ?? 0;
    return { period: currentPeriod(), allowance, used, remaining: Math.max(0, allowance - used), included: plan.llmTokensPerMonth !== null };
  }
}

function accountView(a: AccountRow, p: Principal) {
  const plan = PLANS[a.plan];
  return {
    id: a.id,
    name: a.name,
    createdAt: new Date(a.createdAt).toISOString(),
    credential: { scheme: p.scheme, id: p.credentialId ?? null },
    plan: { name: plan.name, title: plan.title, monthlyMxn: plan.monthlyMxn, listMonthlyMxn: plan.listMonthlyMxn, currency: 'MXN' as const },
  };
}
