// Agents: a durable row, an ordinary sandbox of the owner running nube's ACP agent program, and one ACP
// connection nube holds to it. Building is a durable job (`building` -> `running` once the agent
// answered `initialize`); a sandbox that expired or was deleted makes the agent `lost`, and a revive
// (explicit, or automatic on a message) builds it again on a fresh sandbox under the same id and URL.
import type { McpServer } from '@agentclientprotocol/sdk';
import type { PlanName } from '../../config.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { ApiError, errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import { assertWithinAllowance } from '../../platform/limits.js';
import type { Services } from '../../platform/operation.js';
import { PLANS } from '../../platform/plans.js';
import type { PlatformDeps } from '../deps.js';
import { KeyedLock } from '../sandboxes/runtime/keyed-lock.js';
import { agentProgram } from './bundle.js';
import { AGENT_PORT, AgentLink } from './connection.js';
import type { AgentRow, AgentsRepo } from './repo.js';
import { seedPath, templateFor } from './templates.js';

export const BUILD_JOB = 'agents.build';
const PROGRAM_PATH = '/opt/nube/agent.js';
export const WORKSPACE = '/root/workspace';

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

  view(row: AgentRow, embedToken: string | null = null) {
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
      error: row.error,
      createdAt: new Date(Number(row.created_at)).toISOString(),
      updatedAt: new Date(Number(row.updated_at)).toISOString(),
    };
  }

  /** The caller's agent; another owner's is absent; an embed token addresses its own agent only. */
  async own(p: Principal, id: string): Promise<AgentRow> {
    const row = await this.repo.get(id);
    if (!row || row.owner_id !== p.ownerId) throw errors.notFound('agent');
    if (p.scheme === 'agent' && p.resourceId !== id) throw errors.forbidden("this embed token belongs to another agent", 'CredentialNotAllowed');
    return row;
  }

  async principalOf(row: AgentRow): Promise<Principal> {
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
    const t = templateFor(input.template);
    if (input.mcpServers?.length && !t.acceptsMcp) {
      throw errors.badRequest(`mcpServers apply to ACP templates only (acp), not ${t.name}`, [
        { path: ['body', 'mcpServers'], message: 'not accepted by this template' },
      ]);
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
    const embedToken = `agt_${randomToken(40, BASE62)}`;
    const hash = sha256Hex(embedToken);
    const now = Date.now();
    const secrets: Secrets = { env: input.env, mcpServers: input.mcpServers ?? [], token: randomToken(32, BASE62) };
    const row: AgentRow = {
      id: newId('agt'),
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
      created_at: now,
      updated_at: now,
    };
    await this.repo.insert(row);
    await this.deps.jobs.enqueue(BUILD_JOB, { id: row.id }, { key: `agent-build:${row.id}` });
    return this.view(row, embedToken);
  }

  /** Job: build a `building` agent. A failure leaves it `lost` with the reason in `error`. */
  async build(id: string): Promise<void> {
    await this.lock.run(id, async () => {
      const row = await this.repo.get(id);
      if (row?.status !== 'building') return;
      await this.provision(row).catch(async (e: unknown) => {
        this.deps.log.warn({ err: e, agent: id }, 'agent build failed');
        await this.repo.update(id, { status: 'lost', error: `build failed: ${(e as Error).message}` });
      });
    });
  }

  /** A fresh sandbox with the program, the seed files and a new gateway credential; then connect. */
  private async provision(row: AgentRow): Promise<void> {
    const t0 = performance.now();
    const marks: Record<string, number> = {};
    const mark = (step: string) => {
      marks[step] = Math.round(performance.now() - t0);
    };
    const p = await this.principalOf(row);
    const t = templateFor(row.template);
    const sandboxes = this.s.sandboxes;
    this.dropLink(row.id);
    if (row.sandbox_id) await sandboxes.delete(p, row.sandbox_id).catch(() => {});
    const sbx = await sandboxes.create(p, {
      template: t.sandboxTemplate,
      timeoutSeconds: row.timeout_seconds,
      suspendOnIdle: false,
      name: `agent ${row.id}`,
      metadata: { agentId: row.id },
      env: {},
    });
    mark('sandbox');
    await this.repo.update(row.id, { sandbox_id: sbx.id });
    await this.waitRunning(p, sbx.id);
    // The program, the workspace and the gateway credential at once (each is a round trip of its own);
    // the program starts before the seed files are written, and running waits for both.
    const access = this.gatewayAccess(row);
    const workspace = sandboxes.work.file(p, sbx.id, 'mkdir', { path: WORKSPACE });
    const seeding = workspace.then(async () => {
      for (const f of JSON.parse(row.seed_files) as { name: string; contentBase64: string }[]) {
        await sandboxes.work.file(p, sbx.id, 'write', { path: `${WORKSPACE}/${seedPath(f.name)}`, content: f.contentBase64, encoding: 'base64' });
      }
    });
    seeding.catch(() => {}); // awaited below; a failure must not be an unhandled rejection meanwhile
    await Promise.all([
      agentProgram().then((program) =>
        sandboxes.work.file(p, sbx.id, 'write', { path: PROGRAM_PATH, content: program.toString('base64'), encoding: 'base64' }),
      ),
      workspace,
      access,
    ]);
    mark('files');
    await this.startProgram(row, p, sbx.id, await access);
    mark('started');
    const fresh = { ...row, sandbox_id: sbx.id };
    await Promise.all([seeding, this.link(fresh, 30_000)]);
    mark('initialized');
    await this.repo.forgetAcpSessions(row.id);
    await this.repo.update(row.id, { status: 'running', error: null });
    this.deps.log.debug({ agent: row.id, ms: marks }, 'agent built');
  }

  /** A fresh gateway credential for the agent (the old one revoked) and the gateway's URL. */
  private async gatewayAccess(row: AgentRow): Promise<{ key: string; gateway: string }> {
    const subject = `agent:${row.id}`;
    await this.s.llm.revokeCredential(subject);
    const [key, gateway] = await Promise.all([this.s.llm.issueCredential(row.owner_id, subject), this.s.llm.gatewayUrl()]);
    return { key, gateway };
  }

  /** Starts the agent program in the sandbox with a fresh gateway credential (the old one is revoked). */
  private async startProgram(row: AgentRow, p: Principal, sandboxId: string, access?: { key: string; gateway: string }): Promise<void> {
    const t = templateFor(row.template);
    const { key, gateway } = access ?? (await this.gatewayAccess(row));
    const secrets = this.secrets(row);
    await this.s.sandboxes.work.bgStart(p, sandboxId, {
      command: `exec node ${PROGRAM_PATH}`,
      cwd: WORKSPACE,
      env: {
        ...secrets.env,
        NUBE_AGENT_PORT: String(AGENT_PORT),
        NUBE_AGENT_TOKEN: secrets.token,
        NUBE_AGENT_KIND: t.kind,
        NUBE_AGENT_WORKSPACE: WORKSPACE,
        NUBE_LLM_URL: gateway,
        NUBE_LLM_KEY: key,
      },
    });
  }

  /** The agent program is no longer running in its (living) sandbox: start it again on the same disk. */
  private async restartIfEnded(row: AgentRow): Promise<boolean> {
    if (!row.sandbox_id) return false;
    const p = await this.principalOf(row);
    const { processes } = await this.s.sandboxes.work.bgList(p, row.sandbox_id);
    const mine = processes.filter((x) => x.command.includes(PROGRAM_PATH));
    if (mine.some((x) => x.state === 'running')) return false;
    this.deps.log.warn({ agent: row.id, exitCode: mine.at(-1)?.exitCode }, 'the agent program had ended; started again');
    await this.startProgram(row, p, row.sandbox_id);
    return true;
  }

  /** A sandbox created while its template builds answers `starting`; its provisioning job starts it. */
  private async waitRunning(p: Principal, sandboxId: string): Promise<void> {
    const until = Date.now() + 30 * 60_000;
    for (;;) {
      const v = await this.s.sandboxes.get(p, sandboxId);
      if (v.status === 'running') return;
      if (Date.now() > until) throw new Error('the sandbox did not start within 30 minutes');
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** The open ACP connection to the agent, (re)established when needed. */
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
      const l = await AgentLink.open(address, token, waitMs).catch(async (e: unknown) => {
        if (!(await this.restartIfEnded(row).catch(() => false))) throw e;
        return AgentLink.open(address, token, 30_000);
      });
      this.open.add(row.id);
      l.onClose = () => {
        this.open.delete(row.id);
        if (this.links.get(row.id) === pending) this.links.delete(row.id);
      };
      await l.gateway(await this.s.llm.gatewayUrl());
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

  /** `lost` when the agent's sandbox expired or was deleted. */
  async refresh(row: AgentRow): Promise<AgentRow> {
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

  async list(p: Principal) {
    const rows = await this.repo.list(p.ownerId);
    return { agents: await Promise.all(rows.map(async (r) => this.view(await this.refresh(r)))) };
  }

  async get(p: Principal, id: string) {
    return this.view(await this.refresh(await this.own(p, id)));
  }

  async delete(p: Principal, id: string) {
    const row = await this.own(p, id);
    await this.lock.run(id, async () => {
      this.dropLink(id);
      await this.s.llm.revokeCredential(`agent:${id}`);
      await this.deps.jobs.cancel({ key: `agent-build:${id}` });
      if (row.sandbox_id) await this.s.sandboxes.delete(await this.principalOf(row), row.sandbox_id).catch(() => {});
      await this.repo.delete(id);
      for (const [k, v] of this.embedCache) if (v.principal.resourceId === id) this.embedCache.delete(k);
    });
    return { ok: true as const };
  }

  /** Builds the agent again on a fresh sandbox (same id, URL and embed token), waiting for it. */
  async revive(row: AgentRow): Promise<AgentRow> {
    return this.lock.run(row.id, async () => {
      const current = (await this.repo.get(row.id)) ?? row;
      await this.repo.update(row.id, { status: 'building', error: null });
      try {
        await this.provision(current);
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
    void this.repo.all().then((rows) => {
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
