import { randomBytes } from 'node:crypto';
import type { PlanName } from '../../platform/plans.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { E2B_KEY_PREFIX, SCHEMES } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import { PLANS } from '../../platform/plans.js';
import { currentPeriod, type Usage } from '../../platform/usage.js';
import { assertPublicUrl, OutboundBlockedError } from '../../platform/outbound.js';
import type { AiKey, AiKeys, AiKeyView } from './ai-key.js';
import type { AccountRepo, AccountRow, KeyLimits, KeyRow } from './repo.js';
import type { ScopeCatalog } from '../../platform/scope-catalog.js';
import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import { type Caps, type KeyScope, resourceArea, widerThan } from '../../platform/scopes.js';

export interface CreatedKey {
  key: KeyRow;
  /** The secret itself: shown once, never stored. */
  secret: string;
}

/** Owner keys come in nube's format or in E2B's (`e2b_` and 40 hex digits); both carry the same rights. */
export type KeyFormat = 'nube' | 'e2b';

/** What a new key asks for (POST /account/keys, an agent's or machine's nubeKey). */
/** Whether the principal's account owns the resource (a scoped key's resourceIds are checked with it). */
export type ResourceOwnership = (p: Principal, id: string) => Promise<boolean>;

export interface KeyRequest {
  name: string;
  format?: KeyFormat;
  scopes?: string[];
  resourceIds?: string[];
  workspaceIds?: string[];
  expiresAt?: number;
  caps?: Caps;
  allowedIps?: string[];
  /** Set when nube mints the key for a box (`agent:<id>`): revoked with it. */
  holder?: string;
}

export function generateOwnerKey(format: KeyFormat = 'nube'): string {
  if (format === 'e2b') return E2B_KEY_PREFIX + randomBytes(20).toString('hex');
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
    /** Workspace ids a key names are checked against it (the workspaces area answers). */
    private readonly workspaces?: WorkspaceRegistry,
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

  async createKey(
    accountId: string,
    name: string,
    value = generateOwnerKey(),
    more: Pick<KeyRow, 'limits' | 'expiresAt' | 'parentId' | 'holder'> = { limits: null, expiresAt: null, parentId: null, holder: null },
  ): Promise<CreatedKey> {
    if (!(await this.repo.getAccount(accountId))) throw errors.notFound('account');
    const hash = sha256Hex(value);
    const key: KeyRow = { id: newId('key'), accountId, name, preview: `${value.slice(0, 17)}…`, createdAt: Date.now(), revokedAt: null, ...more };
    await this.repo.insertKey({ ...key, lookup: hash.slice(0, 16), hash });
    return { key, secret: value };
  }

  listKeys(accountId?: string): Promise<KeyRow[]> {
    return this.repo.listKeys(accountId);
  }

  listAccounts(): Promise<AccountRow[]> {
    return this.repo.listAccounts();
  }

  /**
   * Revokes a key; with `accountId` only that account's key (another owner's key is a 404). A scoped
   * key (`by`) revokes only the keys it created: never its owner's wider ones.
   */
  async revokeKey(id: string, accountId?: string, by?: Principal): Promise<void> {
    const hash = await this.repo.revokeKey(id, accountId, Date.now(), by?.scope ? by.credentialId : undefined);
    if (!hash) throw errors.notFound('key');
    this.forget([hash]);
  }

  /** Revokes the keys nube minted for a box (`agent:<id>`, `machine:<id>`) when the box goes. */
  async revokeHeld(accountId: string, holder: string): Promise<void> {
    this.forget(await this.repo.revokeHeld(accountId, holder, Date.now()));
  }

  /**
   * A scoped caller reaches a box holding a key nube minted (`agent:<id>`, `machine:<id>`) only when
   * its own scope covers that key: exec, files, a terminal, SSH, a fork or an agent's turn would hand
   * the box's NUBE_API_KEY over. 403 ScopeMissing otherwise; full owner keys are not asked.
   */
  async assertCovers(p: Principal, holder: string, what: string): Promise<void> {
    const scope = p.scope;
    if (!scope) return;
    for (const row of await this.repo.heldKeys(p.ownerId, holder)) {
      const why = widerThan(this.scopeOf(row.scope, row.expiresAt), scope);
      if (!why) continue;
      throw errors.forbidden(
        `${what} holds the key nube minted for ${holder.replace(':', ' ')} (its NUBE_API_KEY), wider than this key: ${why}. Reaching the box would hand that key over: use a key whose scope covers it`,
        'ScopeMissing',
        { scope: `holder:${holder}`, heldKeyId: row.id },
      );
    }
  }

  private forget(hashes: string[]): void {
    if (!hashes.length) return;
    const gone = new Set(hashes);
    for (const [credential, entry] of this.cache) if (gone.has(entry.hash)) this.cache.delete(credential);
  }

  private catalog: ScopeCatalog | undefined;
  private owns: ResourceOwnership = async () => false;
  /** The registry's scopes and the other areas' resources, once every area is built (server.ts). */
  useCatalog(c: ScopeCatalog, owns: ResourceOwnership): void {
    this.catalog = c;
    this.owns = owns;
  }

  /**
   * A key made by `creator`: a full key only from a full key; a scoped creator's keys stay within its
   * own scope, resources, expiry, caps and addresses (403 KeyScopeTooWide). `owns` answers whether a
   * resource id is the account's (404 otherwise: a key never silently matches nothing).
   */
  async createKeyFor(creator: Principal, r: KeyRequest): Promise<CreatedKey> {
    const parent = creator.scope;
    if (!r.scopes) {
      if (parent) throw wider('a scoped key cannot create a full key: give `scopes` within its own');
      if (r.resourceIds || r.workspaceIds || r.caps || r.allowedIps || r.expiresAt !== undefined) {
        throw errors.validation([{ path: ['body', 'scopes'], message: 'required with resourceIds, workspaceIds, caps, allowedIps or expiresAt' }]);
      }
      return this.createKey(creator.ownerId, r.name, generateOwnerKey(r.format), { limits: null, expiresAt: null, parentId: creator.credentialId ?? null, holder: r.holder ?? creator.holder ?? null });
    }
    const allowed = this.requireCatalog().compile(r.scopes);
    if (r.expiresAt !== undefined && r.expiresAt <= Date.now()) {
      throw errors.validation([{ path: ['body', 'expiresAt'], message: 'must be in the future' }]);
    }
    const bad = (r.resourceIds ?? []).flatMap((id, i) => (resourceArea(id) ? [] : [{ path: ['body', 'resourceIds', i], message: 'not a sandbox, database, agent, file or machine id' }]));
    if (bad.length) throw errors.validation(bad);
    for (const id of r.resourceIds ?? []) if (!(await this.owns(creator, id))) throw errors.notFound(`resource ${id}`);
    // Each workspace must be the account's and within the creator's reach (404 otherwise, never a key
    // narrowed to nothing).
    for (const id of r.workspaceIds ?? []) {
      if (parent?.workspaceIds && !parent.workspaceIds.has(id)) throw wider(`this key reaches only workspaces ${[...parent.workspaceIds].join(', ')}`);
      await this.workspaces?.reach(creator, id);
    }
    let { resourceIds, workspaceIds, expiresAt, caps, allowedIps } = r;
    if (parent) {
      const extra = [...allowed].filter((id) => !parent.allowed.has(id));
      if (extra.length) throw wider(`this key may not grant ${extra.join(', ')}`, { operations: extra });
      if (parent.resourceIds) {
        resourceIds ??= [...parent.resourceIds];
        const outside = resourceIds.filter((id) => !parent.resourceIds!.has(id));
        if (outside.length || resourceIds.length === 0) throw wider(`this key reaches only ${[...parent.resourceIds].join(', ')}`);
      }
      if (parent.workspaceIds) workspaceIds ??= [...parent.workspaceIds];
      if (parent.expiresAt !== undefined) {
        expiresAt ??= parent.expiresAt;
        if (expiresAt > parent.expiresAt) throw wider(`this key expires at ${new Date(parent.expiresAt).toISOString()}; a key it creates cannot outlive it`);
      }
      for (const [m, limit] of Object.entries(parent.caps ?? {}) as [keyof Caps, number][]) {
        caps = { ...caps, [m]: caps?.[m] ?? limit };
        if (caps[m]! > limit) throw wider(`this key's ${m} cap is ${limit}`);
      }
      if (parent.allowedIps) {
        allowedIps ??= [...parent.allowedIps];
        const outside = allowedIps.filter((a) => !parent.allowedIps!.includes(a));
        if (outside.length) throw wider(`this key is accepted only from ${parent.allowedIps.join(', ')}`);
      }
    }
    const limits: KeyLimits = { scopes: r.scopes, ...(resourceIds ? { resourceIds } : {}), ...(workspaceIds ? { workspaceIds } : {}), ...(caps ? { caps } : {}), ...(allowedIps ? { allowedIps } : {}) };
    return this.createKey(creator.ownerId, r.name, generateOwnerKey(r.format), {
      limits,
      expiresAt: expiresAt ?? null,
      parentId: creator.credentialId ?? null,
      holder: r.holder ?? creator.holder ?? null,
    });
  }

  /** What scopes keys may name, per area (GET /account/scopes; the console's key form). */
  scopeCatalog(): ReturnType<ScopeCatalog['areas']> {
    return this.requireCatalog().areas();
  }

  private requireCatalog(): ScopeCatalog {
    if (!this.catalog) throw new Error('the scope catalog is not wired');
    return this.catalog;
  }

  /** The principal's scope for a stored key (compiled once per resolve, then cached with it). */
  private scopeOf(limits: string | null, expiresAt: number | string | null): KeyScope | undefined {
    if (!limits) return undefined;
    const l = JSON.parse(limits) as KeyLimits;
    const ids = l.resourceIds?.length ? new Set(l.resourceIds) : undefined;
    return {
      scopes: l.scopes,
      // Lenient here: a scope naming an operation a later release removed grants nothing, and fails nothing.
      allowed: this.requireCatalog().compile(l.scopes, [], false),
      ...(ids ? { resourceIds: ids, resourceAreas: new Set(l.resourceIds!.map((i) => resourceArea(i)!)) } : {}),
      ...(l.workspaceIds?.length ? { workspaceIds: new Set(l.workspaceIds) } : {}),
      ...(expiresAt !== null ? { expiresAt: Number(expiresAt) } : {}),
      ...(l.caps ? { caps: l.caps } : {}),
      ...(l.allowedIps ? { allowedIps: l.allowedIps } : {}),
    };
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
    const scope = this.scopeOf(row.scope, row.expiresAt);
    const principal: Principal = { scheme: 'owner', ownerId: row.accountId, plan: row.plan as PlanName, credentialId: row.id, ...(scope ? { scope } : {}), ...(row.holder ? { holder: row.holder } : {}) };
    if (this.authCacheMs > 0) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(credential, { principal, hash, until: now + this.authCacheMs });
    }
    return principal;
  }

  // Key names never change: the audit log reads them per mutating call, so they stay cached.
  private readonly keyNames = new Map<string, string | undefined>();

  /** An owner key's name by id (synchronously when cached); undefined for an unknown id. */
  keyName(id: string): string | undefined | Promise<string | undefined> {
    if (this.keyNames.has(id)) return this.keyNames.get(id);
    return this.repo.keyName(id).then((name) => {
      if (this.keyNames.size > 10_000) this.keyNames.clear();
      if (name !== undefined) this.keyNames.set(id, name);
      return name;
    });
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
    if (!row) return null;
    const scope = this.scopeOf(row.scope, row.expiresAt);
    return { scheme: 'owner', ownerId: row.accountId, plan: row.plan as PlanName, credentialId: keyId, ...(scope ? { scope } : {}) };
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
    const [storage, databases, boxes, agents, volumes, volumeBytes, aiCredits, llmTokens, webQueries] = await Promise.all([
      this.usage.gauge('storageBytes', p.ownerId),
      this.usage.gauge('databases', p.ownerId),
      this.usage.gauge('boxes', p.ownerId),
      this.usage.gauge('agents', p.ownerId),
      this.usage.gauge('volumes', p.ownerId),
      this.usage.gauge('volumeBytes', p.ownerId),
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
      volumes: item(volumes, plan.volumes),
      volumeGB: item(volumeBytes / 1024 ** 3, plan.volumeGB),
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

function wider(message: string, extra: Record<string, unknown> = {}) {
  return errors.forbidden(`a key cannot create a key wider than itself: ${message}`, 'KeyScopeTooWide', extra);
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
