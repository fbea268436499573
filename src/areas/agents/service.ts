// Agents: a durable row, an ordinary sandbox of the owner running nube's ACP agent program, and one ACP
// connection nube holds to it. Building is a durable job (`building` -> `running` once the agent
// answered `initialize`); a sandbox that expired or was deleted makes the agent `lost`, and a revive
// (explicit, or automatic on a message) builds it again on a fresh sandbox under the same id and URL.
import type { McpServer } from '@agentclientprotocol/sdk';
import type { PlanName } from '../../platform/plans.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { ApiError, errors } from '../../platform/errors.js';
import { cutShort, type JobContext } from '../../platform/jobs.js';
import { ElsewhereError, runPinned } from '../../platform/nodes.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import { assertWithinAllowance } from '../../platform/limits.js';
import type { Services } from '../../platform/operation.js';
import { PLANS } from '../../platform/plans.js';
import type { PlatformDeps } from '../deps.js';
import type { KeyRequest } from '../account/service.js';
import { KeyedLock } from '../sandboxes/runtime/keyed-lock.js';
import { Builder } from './build.js';
import { AgentLink } from './connection.js';
import type { AgentRow, AgentsRepo } from './repo.js';
import type { SandboxVolume } from '../sandboxes/volume-binder.js';
import { seedPath, templateFor } from './templates.js';


export const BUILD_JOB = 'agents.build';

export type McpInput =
  | { name: string; type?: 'stdio'; command: string; args?: string[]; env?: Record<string, string> }
  | { name: string; type: 'http'; url: string; headers?: Record<string, string> };

export interface CreateAgentInput {
  template: string;
  env: Record<string, string>;
  name?: string;
  timeoutSeconds?: number;
  seedFiles?: { name: string; contentBase64: string }[];
  mcpServers?: McpInput[];
  /** Volumes the agent holds and every box of it mounts (kept across revives, released at delete). */
  volumes?: SandboxVolume[];
  /** A key nube mints for the agent's own code (NUBE_API_KEY), revoked with the agent. */
  nubeKey?: Omit<KeyRequest, 'name'>;
  /** The workspace it (and its boxes) land in; resolved in create. */
  workspaceId?: string;
}

interface Secrets {
  env: Record<string, string>;
  mcpServers: McpInput[];
  /** Sent as the first line of every connection to the agent program. */
  token: string;
}

type Needs = Pick<Services, 'sandboxes' | 'llm' | 'account'>;

/** The ACP form of the API's MCP servers (env and headers as name/value lists). */
export function acpMcpServers(list: McpInput[]): McpServer[] {
  return list.map((s) =>
    s.type === 'http'
      ? { type: 'http', name: s.name, url: s.url, headers: Object.entries(s.headers ?? {}).map(([name, value]) => ({ name, value })) }
      : { name: s.name, command: s.command, args: s.args ?? [], env: Object.entries(s.env ?? {}).map(([name, value]) => ({ name, value })) },
  );
}

export class AgentsCore {
  private readonly links = new Map<string, Promise<AgentLink>>();
  private readonly embedCache = new Map<string, { principal: Principal; until: number }>();
  /** One lifecycle change (build, revive, delete) of an agent at a time. */
  readonly lock = new KeyedLock();
  readonly builder = new Builder(this);

  constructor(
    readonly repo: AgentsRepo,
    readonly deps: PlatformDeps,
    readonly s: Needs,
  ) {}

  secrets(row: AgentRow): Secrets {
    return JSON.parse(this.deps.secretBox.open(row.secrets_sealed)) as Secrets;
  }

  wsUrl(id: string): string {
    return `${this.deps.publicUrl().replace(/^http/, 'ws')}/api/v2/agents/${id}/acp`;
  }

  view(row: AgentRow, embedToken: string | null = null, volumes: SandboxVolume[] = []) {
    return {
      id: row.id,
      agentId: row.id,
      name: row.name,
      template: row.template,
      status: row.status,
      sandboxId: row.sandbox_id,
      wsUrl: this.wsUrl(row.id),
      embedToken,
      timeoutSeconds: row.timeout_seconds,
      volumes,
      error: row.error,
      createdAt: new Date(Number(row.created_at)).toISOString(),
      updatedAt: new Date(Number(row.updated_at)).toISOString(),
      workspaceId: row.workspace_id,
    };
  }

  /** The caller's agent; another owner's is absent; an embed token addresses its own agent only. */
  async own(p: Principal, id: string): Promise<AgentRow> {
    const row = await this.repo.get(id);
    if (!row || row.owner_id !== p.ownerId || !this.deps.workspaces.sees(p, row.workspace_id)) throw errors.notFound('agent');
    if (p.scheme === 'agent' && p.resourceId !== id) throw errors.forbidden("this embed token belongs to another agent", 'CredentialNotAllowed');
    return row;
  }

  async principalOf(row: Pick<AgentRow, 'owner_id'>): Promise<Principal> {
    return { scheme: 'owner', ownerId: row.owner_id, plan: await this.s.account.planOf(row.owner_id) };
  }

  readonly embedResolver: CredentialResolver = {
    scheme: 'agent',
    resolve: (credential) => {
      const hit = this.embedCache.get(credential);
      if (hit && hit.until > Date.now()) return hit.principal;
      return this.resolveEmbed(credential);
    },
  };

  private async resolveEmbed(credential: string): Promise<Principal | null> {
    const hash = sha256Hex(credential);
    const row = (await this.repo.byEmbedLookup(hash.slice(0, 16))).find((r) => safeEqual(r.embed_hash, hash));
    if (!row) return null;
    const principal: Principal = {
      scheme: 'agent',
      ownerId: row.owner_id,
      plan: (await this.s.account.planOf(row.owner_id)) as PlanName,
      credentialId: row.id,
      resourceId: row.id,
    };
    if (this.deps.config.authCacheMs > 0) {
      if (this.embedCache.size > 10_000) this.embedCache.clear();
      this.embedCache.set(credential, { principal, until: Date.now() + this.deps.config.authCacheMs });
    }
    return principal;
  }

  async create(p: Principal, input: CreateAgentInput) {
    const workspaceId = await this.deps.workspaces.forCreate(p, input.workspaceId);
    const t = templateFor(input.template);
    if (input.mcpServers?.length && !t.acceptsMcp) {
      throw errors.badRequest(`mcpServers apply to ACP templates only (acp, goose), not ${t.name}`, [
        { path: ['body', 'mcpServers'], message: 'not accepted by this template' },
      ]);
    }
    const unavailable = await this.s.sandboxes.templateUnavailable(t.sandboxTemplate);
    if (unavailable) {
      throw errors.badRequest(`the ${t.name} template is not available on this nube: ${unavailable}`, [{ path: ['body', 'template'], message: 'template unavailable' }], 'TemplateUnavailable');
    }
    const seeds = input.seedFiles ?? [];
    const bad = seeds.flatMap((f, i) => (seedPath(f.name) ? [] : [{ path: ['body', 'seedFiles', i, 'name'], message: 'must be a relative path inside the workspace (no .., no leading /)' }]));
    if (bad.length) throw errors.badRequest('seed file names must stay inside the workspace', bad, 'ValidationError');
    for (const [i, f] of seeds.entries()) {
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(f.contentBase64.replace(/\s+/g, ''))) {
        throw errors.validation([{ path: ['body', 'seedFiles', i, 'contentBase64'], message: 'not valid base64' }]);
      }
    }
    const plan = PLANS[p.plan];
    const timeout = input.timeoutSeconds ?? plan.sessionSeconds;
    if (timeout > plan.sessionSeconds) {
      throw errors.paymentRequired(`your ${plan.title} plan allows sessions of ${plan.sessionSeconds} s; asked for ${timeout} s`, 'SessionTooLong', {
        limitSeconds: plan.sessionSeconds,
        requestedSeconds: timeout,
      });
    }
    assertWithinAllowance(p.plan, 'simultaneousAgents', await this.repo.count(p.ownerId));
    await this.s.llm.assertReady(p.ownerId, p.plan);
    // The agent lives where the scheduler puts its sandbox (where its volumes are, when it holds some):
    // its build job and its connection run there.
    const volumes = input.volumes ?? [];
    const nodeId = volumes.length
      ? await this.s.sandboxes.placeWithVolumes(p.ownerId, volumes)
      : await this.s.sandboxes.nodeFor(p.ownerId, t.sandboxTemplate);
    const embedToken = `agt_${randomToken(40, BASE62)}`;
    const hash = sha256Hex(embedToken);
    const now = Date.now();
    const id = newId('agt');
    // Minted last, after every check: a refused create leaves no key behind. nube's values win over env's.
    // Bound to the agent's own workspace unless it names its workspaces.
    const nubeEnv = input.nubeKey ? await this.mintKey(p, id, { ...input.nubeKey, workspaceIds: input.nubeKey.workspaceIds ?? [workspaceId] }) : {};
    const secrets: Secrets = { env: { ...input.env, ...nubeEnv }, mcpServers: input.mcpServers ?? [], token: randomToken(32, BASE62) };
    const row: AgentRow = {
      id,
      owner_id: p.ownerId,
      name: input.name ?? null,
      template: t.name,
      status: 'building',
      sandbox_id: null,
      embed_lookup: hash.slice(0, 16),
      embed_hash: hash,
      secrets_sealed: this.deps.secretBox.seal(JSON.stringify(secrets)),
      seed_files: JSON.stringify(seeds),
      timeout_seconds: timeout,
      error: null,
      default_session_id: null,
      node_id: nodeId,
      created_at: now,
      updated_at: now,
      workspace_id: workspaceId,
    };
    try {
      // Held by the agent, not its box: a revive's fresh box mounts them again.
      await this.s.sandboxes.holdVolumes(p, id, volumes);
      await this.repo.insert(row);
    } catch (e) {
      await this.s.sandboxes.releaseVolumes(id);
      if (input.nubeKey) await this.s.account.revokeHeld(p.ownerId, `agent:${id}`);
      throw e;
    }
    await this.deps.jobs.enqueue(this.deps.nodes.jobType(BUILD_JOB, nodeId), { id: row.id }, { key: `agent-build:${row.id}` });
    return this.view(row, embedToken, volumes);
  }

  /** The agent's own key: within the caller's scope (the account checks), held by the agent. */
  private async mintKey(p: Principal, id: string, k: Omit<KeyRequest, 'name'>): Promise<Record<string, string>> {
    const { secret } = await this.s.account.createKeyFor(p, { ...k, name: `agent ${id}`, holder: `agent:${id}` });
    // The box API, not the public URL: the key works only from this box, through it (docs/decisions.md).
    return { NUBE_API_KEY: secret, NUBE_BASE_URL: await this.deps.boxApiUrl() };
  }

  /** Job: build a `building` agent. A failure leaves it `lost` with the reason in `error`. */
  /** A build cut by nube's own stop (`job`) is not the agent's failure: it runs again when nube is back. */
  async build(id: string, job?: Pick<JobContext, 'signal' | 'stopping'>): Promise<void> {
    await this.lock.run(id, async () => {
      const row = await this.repo.get(id);
      if (row?.status !== 'building') return;
      await this.builder.provision(row).catch(async (e: unknown) => {
        if (job && cutShort(job)) throw e;
        this.deps.log.warn({ err: e, agent: id }, 'agent build failed');
        await this.repo.update(id, { status: 'lost', error: `build failed: ${(e as Error).message}` });
      });
    });
  }

  /** Whether nube holds an open ACP connection to the agent (which proves its sandbox is alive). */
  connected(id: string): boolean {
    return this.open.has(id);
  }
  private readonly open = new Set<string>();

  link(row: AgentRow, waitMs = 5_000): Promise<AgentLink> {
    const known = this.links.get(row.id);
    if (known) {
      return known.then(
        (l) => (l.closed ? this.openLink(row, waitMs) : l),
        () => this.openLink(row, waitMs),
      );
    }
    return this.openLink(row, waitMs);
  }

  private openLink(row: AgentRow, waitMs: number): Promise<AgentLink> {
    const pending = (async () => {
      if (!row.sandbox_id) throw new ApiError(409, 'AgentNotReady', 'the agent has no sandbox yet');
      const address = await this.s.sandboxes.addressOf(await this.principalOf(row), row.sandbox_id);
      const token = this.secrets(row).token;
      // Not answering within a second: the program may have ended (start it again) or still be starting,
      // or be ending right now (still listed running): look again every second until `waitMs`.
      const gateway = await this.s.llm.gatewayUrl();
      const until = Date.now() + waitMs;
      const l = await AgentLink.open(address, token, Math.min(waitMs, 1_000), gateway).catch(async (first: unknown) => {
        for (let last = first; ; ) {
          if (await this.builder.restartIfEnded(row).catch(() => false)) return AgentLink.open(address, token, 30_000, gateway);
          const left = until - Date.now();
          if (left <= 0) throw last;
          last = await AgentLink.open(address, token, Math.min(left, 1_000), gateway).then(
            (link) => link,
            (e: unknown) => e,
          );
          if (last instanceof AgentLink) return last;
        }
      });
      this.open.add(row.id);
      l.onClose = () => {
        this.open.delete(row.id);
        if (this.links.get(row.id) === pending) this.links.delete(row.id);
      };
      return l;
    })();
    this.links.set(row.id, pending);
    pending.catch(() => {
      if (this.links.get(row.id) === pending) this.links.delete(row.id);
    });
    return pending;
  }

  dropLink(id: string): void {
    const l = this.links.get(id);
    this.links.delete(id);
    l?.then((x) => x.close()).catch(() => {});
  }

  /**
   * `lost` when the agent's sandbox expired or was deleted, or (shown, not recorded: it may come
   * back) while the node holding it is down.
   */
  async refresh(row: AgentRow): Promise<AgentRow> {
    const down = await this.deps.nodes.lostReason(row.node_id);
    if (down) return { ...row, status: 'lost', error: down };
    if (row.status !== 'running' || !row.sandbox_id) return row;
    const gone = await this.s.sandboxes.get(await this.principalOf(row), row.sandbox_id).then(
      (v) => v.status !== 'running',
      (e: unknown) => e instanceof ApiError && e.status === 404,
    );
    if (!gone) return row;
    this.dropLink(row.id);
    const patch = { status: 'lost' as const, error: 'its sandbox is gone (expired or deleted); revive it or send a message' };
    await this.repo.update(row.id, patch);
    return { ...row, ...patch };
  }

  async list(p: Principal, workspaceId?: string) {
    const rows = await this.repo.list(p.ownerId, await this.deps.workspaces.filter(p, workspaceId));
    return { agents: await Promise.all(rows.map(async (r) => this.view(await this.refresh(r), null, await this.s.sandboxes.volumesOf(r.id)))) };
  }

  async get(p: Principal, id: string) {
    const row = await this.own(p, id);
    return this.view(await this.refresh(row), null, await this.s.sandboxes.volumesOf(row.id));
  }

  async delete(p: Principal, id: string) {
    const row = await this.own(p, id);
    await this.lock.run(id, async () => {
      this.dropLink(id);
      await this.s.llm.revokeCredential(`agent:${id}`);
      await this.s.account.revokeHeld(row.owner_id, `agent:${id}`);
      await this.deps.jobs.cancel({ key: `agent-build:${id}` });
      if (row.sandbox_id) await this.s.sandboxes.delete(await this.principalOf(row), row.sandbox_id).catch(() => {});
      await this.s.sandboxes.releaseVolumes(id);
      await this.repo.delete(id);
      for (const [k, v] of this.embedCache) if (v.principal.resourceId === id) this.embedCache.delete(k);
    });
    return { ok: true as const };
  }

  /**
   * Where an agent's work runs: its node, or, while that node is down, a node the scheduler picks (a
   * revive moves it there). Elsewhere: ElsewhereError, and the REST layer relays the request.
   */
  async home(row: AgentRow): Promise<void> {
    if (!(await this.deps.nodes.lostReason(row.node_id))) return this.deps.nodes.assertHere(row.node_id, 'agent');
    const t = templateFor(row.template);
    const nodeId = await this.s.sandboxes.nodeFor(row.owner_id, t.sandboxTemplate);
    if (nodeId !== this.deps.nodes.id) throw new ElsewhereError(nodeId);
  }

  /**
   * Builds the agent again on a fresh sandbox (same id, URL and embed token), waiting for it, on this
   * node (its own, or the one home() moved it to).
   */
  async revive(row: AgentRow): Promise<AgentRow> {
    await this.home(row);
    return runPinned(() => this.reviveHere(row));
  }

  private async reviveHere(row: AgentRow): Promise<AgentRow> {
    return this.lock.run(row.id, async () => {
      const current = (await this.repo.get(row.id)) ?? row;
      await this.repo.update(row.id, { status: 'building', error: null, node_id: this.deps.nodes.id });
      try {
        await this.builder.provision(current);
      } catch (e) {
        const message = (e as Error).message;
        await this.repo.update(row.id, { status: 'lost', error: `revive failed: ${message}` });
        if (e instanceof ApiError) throw e;
        throw new ApiError(502, 'ReviveFailed', `the agent could not be revived: ${message}`);
      }
      return (await this.repo.get(row.id))!;
    });
  }

  /** After a restart of nube: running agents are connected again in the background. */
  reconnectAll(): void {
    void this.repo.onNode(this.deps.nodes.id).then((rows) => {
      for (const r of rows) {
        if (r.status !== 'running') continue;
        this.refresh(r)
          .then((fresh) => (fresh.status === 'running' ? this.link(fresh, 10_000) : undefined))
          .catch((e: unknown) => this.deps.log.warn({ err: e, agent: r.id }, 'agent reconnect failed; the next turn retries'));
      }
    });
  }

  async close(): Promise<void> {
    await this.lock.settle();
    for (const id of [...this.links.keys()]) this.dropLink(id);
  }
}
