// Managing the fleet: fleet agents (each with its MESSAGE token), configuration groups (a prompt and MCP
// connectors), client credentials (list the fleet agents with their tokens) and ephemeral public read
// keys. Tokens resolve to principals scoped to their one fleet agent.
import type { PlanName } from '../../platform/plans.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { ApiError, errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { Services } from '../../platform/operation.js';
import type { McpInput } from '../agents/service.js';
import type { PlatformDeps } from '../deps.js';
import type { Signer } from './cursor.js';
import type { ConfigGroupRow, FleetAgentRow, FleetRepo } from './repo.js';

export interface FleetAgentInput {
  name: string;
  model?: string | null;
  instructions?: string;
  channels?: string[];
  capacity?: number;
  configGroupIds?: string[];
}

export interface ConfigGroupInput {
  name: string;
  prompt?: string;
  mcpServers?: McpInput[];
}

const iso = (ms: number | string) => new Date(Number(ms)).toISOString();
const PUBLIC_KEY_TTL_S = 900;

export class FleetAdmin {
  private readonly cache = new Map<string, { principal: Principal; until: number }>();

  constructor(
    readonly repo: FleetRepo,
    readonly deps: PlatformDeps,
    readonly signer: Signer,
    private readonly account: Services['account'],
    /** The node a new fleet agent's pool goes to (the scheduler's pick for its boxes). */
    private readonly placePool: (ownerId: string) => Promise<string>,
  ) {}

  view(row: FleetAgentRow) {
    return {
      id: row.id,
      name: row.name,
      model: row.model,
      instructions: row.instructions,
      channels: JSON.parse(row.channels) as string[],
      capacity: row.capacity,
      configGroupIds: JSON.parse(row.config_group_ids) as string[],
      token: this.deps.secretBox.open(row.token_sealed),
      createdAt: iso(row.created_at),
      updatedAt: iso(row.updated_at),
      workspaceId: row.workspace_id,
    };
  }

  groupView(row: ConfigGroupRow) {
    return {
      id: row.id,
      name: row.name,
      prompt: row.prompt,
      mcpServers: this.mcpOf(row),
      createdAt: iso(row.created_at),
      updatedAt: iso(row.updated_at),
    };
  }

  mcpOf(row: ConfigGroupRow): McpInput[] {
    return JSON.parse(this.deps.secretBox.open(row.mcp_sealed)) as McpInput[];
  }

  /**
   * The fleet agent a request addresses. The owner's (another owner's: 404); a token or public key
   * addresses only its own fleet agent (403, as the spec lists for fleet message).
   */
  async own(p: Principal, id: string): Promise<FleetAgentRow> {
    const row = await this.repo.agent(id);
    if (!row || row.owner_id !== p.ownerId || !this.deps.workspaces.sees(p, row.workspace_id)) {
      if (p.scheme === 'fleetAgent' || p.scheme === 'fleetPublic') throw errors.forbidden('this credential belongs to another fleet agent', 'CredentialNotAllowed');
      throw errors.notFound('fleet agent');
    }
    if ((p.scheme === 'fleetAgent' || p.scheme === 'fleetPublic') && p.resourceId !== id) {
      throw errors.forbidden('this credential belongs to another fleet agent', 'CredentialNotAllowed');
    }
    return row;
  }

  private async checkGroups(ownerId: string, ids: string[]): Promise<void> {
    const bad: { path: (string | number)[]; message: string }[] = [];
    for (const [i, id] of ids.entries()) {
      const g = await this.repo.group(id);
      if (!g || g.owner_id !== ownerId) bad.push({ path: ['body', 'configGroupIds', i], message: 'no such configuration group' });
    }
    if (bad.length) throw errors.badRequest('unknown configuration group', bad, 'ValidationError');
  }

  private checkCapacity(capacity: number): void {
    const max = this.deps.config.fleet.maxBoxes;
    if (capacity > max) {
      throw errors.badRequest(`capacity is at most ${max} boxes on this host (NUBE_FLEET_MAX_BOXES)`, [{ path: ['body', 'capacity'], message: `at most ${max}` }], 'ValidationError');
    }
  }

  async create(p: Principal, input: FleetAgentInput & { workspaceId?: string }) {
    const workspaceId = await this.deps.workspaces.forCreate(p, input.workspaceId);
    const capacity = input.capacity ?? 2;
    this.checkCapacity(capacity);
    await this.checkGroups(p.ownerId, input.configGroupIds ?? []);
    const token = `flt_tk_${randomToken(40, BASE62)}`;
    const hash = sha256Hex(token);
    const now = Date.now();
    const row: FleetAgentRow = {
      id: newId('flt'),
      owner_id: p.ownerId,
      name: input.name,
      model: input.model ?? null,
      instructions: input.instructions ?? '',
      channels: JSON.stringify(input.channels ?? ['web']),
      capacity,
      config_group_ids: JSON.stringify(input.configGroupIds ?? []),
      token_lookup: hash.slice(0, 16),
      token_hash: hash,
      token_sealed: this.deps.secretBox.seal(token),
      telegram_sealed: null,
      node_id: await this.placePool(p.ownerId),
      created_at: now,
      updated_at: now,
      workspace_id: workspaceId,
    };
    await this.repo.insertAgent(row);
    return this.view(row);
  }

  async list(p: Principal, workspaceId?: string) {
    return { pools: (await this.repo.agents(p.ownerId, await this.deps.workspaces.filter(p, workspaceId))).map((r) => this.view(r)) };
  }

  async update(p: Principal, id: string, patch: Partial<FleetAgentInput> & { rotateToken?: boolean }) {
    const row = await this.own(p, id);
    if (patch.capacity !== undefined) this.checkCapacity(patch.capacity);
    if (patch.configGroupIds) await this.checkGroups(p.ownerId, patch.configGroupIds);
    const set: Partial<FleetAgentRow> = {};
    if (patch.name !== undefined) set.name = patch.name;
    if (patch.model !== undefined) set.model = patch.model;
    if (patch.instructions !== undefined) set.instructions = patch.instructions;
    // `telegram` stays listed while a bot is connected (DELETE .../telegram removes it).
    if (patch.channels !== undefined) set.channels = JSON.stringify(row.telegram_sealed ? [...new Set([...patch.channels, 'telegram'])] : patch.channels);
    if (patch.capacity !== undefined) set.capacity = patch.capacity;
    if (patch.configGroupIds !== undefined) set.config_group_ids = JSON.stringify(patch.configGroupIds);
    if (patch.rotateToken) {
      const token = `flt_tk_${randomToken(40, BASE62)}`;
      const hash = sha256Hex(token);
      Object.assign(set, { token_lookup: hash.slice(0, 16), token_hash: hash, token_sealed: this.deps.secretBox.seal(token) });
      this.forget(id);
    }
    await this.repo.updateAgent(id, set);
    return this.view({ ...row, ...set, updated_at: Date.now() });
  }

  forget(fleetAgentId: string): void {
    for (const [k, v] of this.cache) if (v.principal.resourceId === fleetAgentId) this.cache.delete(k);
  }

  // configuration groups

  async createGroup(p: Principal, input: ConfigGroupInput) {
    const now = Date.now();
    const row: ConfigGroupRow = {
      id: newId('cfg'),
      owner_id: p.ownerId,
      name: input.name,
      prompt: input.prompt ?? '',
      mcp_sealed: this.deps.secretBox.seal(JSON.stringify(input.mcpServers ?? [])),
      created_at: now,
      updated_at: now,
    };
    await this.repo.insertGroup(row);
    return this.groupView(row);
  }

  async ownGroup(p: Principal, id: string): Promise<ConfigGroupRow> {
    const g = await this.repo.group(id);
    if (!g || g.owner_id !== p.ownerId) throw errors.notFound('configuration group');
    return g;
  }

  async listGroups(p: Principal) {
    return { configGroups: (await this.repo.groups(p.ownerId)).map((g) => this.groupView(g)) };
  }

  async updateGroup(p: Principal, id: string, patch: Partial<ConfigGroupInput>) {
    const g = await this.ownGroup(p, id);
    const set: Partial<ConfigGroupRow> = {};
    if (patch.name !== undefined) set.name = patch.name;
    if (patch.prompt !== undefined) set.prompt = patch.prompt;
    if (patch.mcpServers !== undefined) set.mcp_sealed = this.deps.secretBox.seal(JSON.stringify(patch.mcpServers));
    await this.repo.updateGroup(id, set);
    return this.groupView({ ...g, ...set, updated_at: Date.now() });
  }

  async deleteGroup(p: Principal, id: string) {
    await this.ownGroup(p, id);
    const users = (await this.repo.agents(p.ownerId)).filter((a) => (JSON.parse(a.config_group_ids) as string[]).includes(id));
    if (users.length) throw errors.conflict('fleet agents still list this configuration group', 'ConfigGroupInUse', { fleetAgentIds: users.map((u) => u.id) });
    await this.repo.deleteGroup(id);
    return { ok: true as const };
  }

  // client credentials and public keys

  async createClient(p: Principal, name?: string) {
    const credential = `nube_cc_${randomToken(40, BASE62)}`;
    const hash = sha256Hex(credential);
    const row = { id: newId('fcc'), owner_id: p.ownerId, name: name ?? null, lookup: hash.slice(0, 16), hash, created_at: Date.now() };
    await this.repo.insertClient(row);
    return { id: row.id, name: row.name, credential, createdAt: iso(row.created_at) };
  }

  async listClients(p: Principal) {
    return { clientCredentials: (await this.repo.clients(p.ownerId)).map((c) => ({ id: c.id, name: c.name, credential: null, createdAt: iso(c.created_at) })) };
  }

  async deleteClient(p: Principal, id: string) {
    if (!(await this.repo.deleteClient(p.ownerId, id))) throw errors.notFound('client credential');
    for (const [k, v] of this.cache) if (v.principal.credentialId === id) this.cache.delete(k);
    return { ok: true as const };
  }

  async publicKey(p: Principal, id: string, groupId: string, ttlSeconds = PUBLIC_KEY_TTL_S) {
    const row = await this.own(p, id);
    const expiresAt = Date.now() + ttlSeconds * 1000;
    const key = this.signer.publicKey({ ownerId: p.ownerId, fleetAgentId: id, groupId, expiresAt, generation: tokenGeneration(row) });
    return { key, groupId, expiresAt: iso(expiresAt) };
  }

  // credential resolvers

  private cached(credential: string, load: () => Promise<Principal | null>): Principal | null | Promise<Principal | null> {
    const hit = this.cache.get(credential);
    if (hit && hit.until > Date.now()) return hit.principal;
    return load().then((principal) => {
      if (principal && this.deps.config.authCacheMs > 0) {
        if (this.cache.size > 10_000) this.cache.clear();
        this.cache.set(credential, { principal, until: Date.now() + this.deps.config.authCacheMs });
      }
      return principal;
    });
  }

  private async plan(ownerId: string): Promise<PlanName> {
    return (await this.account.planOf(ownerId)) as PlanName;
  }

  readonly tokenResolver: CredentialResolver = {
    scheme: 'fleetAgent',
    resolve: (credential) =>
      this.cached(credential, async () => {
        const hash = sha256Hex(credential);
        const row = (await this.repo.agentsByToken(hash.slice(0, 16))).find((r) => safeEqual(r.token_hash, hash));
        if (!row) return null;
        return { scheme: 'fleetAgent', ownerId: row.owner_id, plan: await this.plan(row.owner_id), credentialId: row.id, resourceId: row.id };
      }),
  };

  readonly clientResolver: CredentialResolver = {
    scheme: 'client',
    resolve: (credential) =>
      this.cached(credential, async () => {
        const hash = sha256Hex(credential);
        const row = (await this.repo.clientsByLookup(hash.slice(0, 16))).find((r) => safeEqual(r.hash, hash));
        if (!row) return null;
        return { scheme: 'client', ownerId: row.owner_id, plan: await this.plan(row.owner_id), credentialId: row.id };
      }),
  };

  /**
   * Signed, carrying its expiry and the token generation it was minted under: it ends with the fleet
   * agent (deleted) and with its token (rotated), not only at its expiry. `credentialId` carries the one
   * conversation it reads.
   */
  readonly publicResolver: CredentialResolver = {
    scheme: 'fleetPublic',
    resolve: (credential) => {
      const k = this.signer.readPublicKey(credential);
      if (!k) return null;
      return this.cached(credential, async () => {
        const row = await this.repo.agent(k.fleetAgentId);
        if (!row || row.owner_id !== k.ownerId || tokenGeneration(row) !== k.generation) return null;
        return { scheme: 'fleetPublic', ownerId: k.ownerId, plan: await this.plan(k.ownerId), credentialId: k.groupId, resourceId: k.fleetAgentId };
      });
    },
  };
}

/** Which of the fleet agent's tokens is current (changes when it is rotated); no secret in it. */
function tokenGeneration(row: Pick<FleetAgentRow, 'token_lookup'>): string {
  return row.token_lookup.slice(0, 8);
}

export function fleetFull(retryAfter: number): ApiError {
  return new ApiError(503, 'FleetFull', `the fleet is full at this instant; retry after ${retryAfter} s`, { retryAfter }, { 'retry-after': String(retryAfter) });
}
