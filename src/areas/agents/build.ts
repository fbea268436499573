// Building an agent: a fresh sandbox with the program, the workspace and its seed files and a new
// gateway credential, then the ACP connection; and starting the program again when it ended.
import type { Principal } from '../../platform/auth.js';
import type { Services } from '../../platform/operation.js';
import type { PlatformDeps } from '../deps.js';
import { agentProgram } from './bundle.js';
import { AGENT_PORT, type AgentLink } from './connection.js';
import type { AgentRow, AgentsRepo } from './repo.js';
import { PROGRAM_PATH, PROGRAM_SECRETS, seedPath, templateFor, WORKSPACE } from './templates.js';

/** What a build needs of the agents service (declared here so the builder does not import it). */
export interface BuildHost {
  readonly repo: AgentsRepo;
  readonly deps: Pick<PlatformDeps, 'log'>;
  readonly s: Pick<Services, 'sandboxes' | 'llm'>;
  principalOf(row: AgentRow): Promise<Principal>;
  secrets(row: AgentRow): { env: Record<string, string>; token: string };
  link(row: AgentRow, waitMs?: number): Promise<AgentLink>;
  dropLink(id: string): void;
}

export class Builder {
  constructor(private readonly core: BuildHost) {}

  /** A fresh sandbox with the program, the seed files and a new gateway credential; then connect. */
  async provision(row: AgentRow): Promise<void> {
    const t0 = performance.now();
    const marks: Record<string, number> = {};
    const mark = (step: string) => {
      marks[step] = Math.round(performance.now() - t0);
    };
    const p = await this.core.principalOf(row);
    const t = templateFor(row.template);
    const sandboxes = this.core.s.sandboxes;
    this.core.dropLink(row.id);
    if (row.sandbox_id) await sandboxes.delete(p, row.sandbox_id).catch(() => {});
    // What the agent holds (volumes.ts): each of its boxes mounts it under the agent's hold.
    const volumes = await sandboxes.volumesOf(row.id);
    const sbx = await sandboxes.create(p, {
      ...(volumes.length ? { volumes, volumeHolder: row.id } : {}),
      template: t.sandboxTemplate,
      timeoutSeconds: row.timeout_seconds,
      suspendOnIdle: false,
      name: `agent ${row.id}`,
      metadata: { agentId: row.id },
      env: {},
      workspaceId: row.workspace_id,
    });
    mark('sandbox');
    await this.core.repo.update(row.id, { sandbox_id: sbx.id });
    await this.waitRunning(p, sbx.id);
    // The program, the workspace and the gateway credential at once (each is a round trip of its own);
    // the program starts before the seed files are written, and running waits for both.
    const access = this.gatewayAccess(row, p, sbx.id);
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
    await Promise.all([seeding, this.core.link(fresh, 30_000)]);
    mark('initialized');
    await this.core.repo.forgetAcpSessions(row.id);
    await this.core.repo.update(row.id, { status: 'running', error: null });
    this.core.deps.log.debug({ agent: row.id, ms: marks }, 'agent built');
  }

  /**
   * A fresh gateway credential for the agent (the old one revoked), accepted from its sandbox's address
   * only, and the gateway's URL.
   */
  private async gatewayAccess(row: AgentRow, p: Principal, sandboxId: string): Promise<{ key: string; gateway: string }> {
    const subject = `agent:${row.id}`;
    const llm = this.core.s.llm;
    const [, address] = await Promise.all([llm.revokeCredential(subject), this.core.s.sandboxes.addressOf(p, sandboxId)]);
    const [key, gateway] = await Promise.all([llm.issueCredential(row.owner_id, subject, address), llm.gatewayUrl()]);
    return { key, gateway };
  }

  /**
   * Starts the agent program in the sandbox with a fresh gateway credential (the old one is revoked).
   * Its secrets go in a file the program reads and removes at start, never in its environment (which
   * the agent's tools inherit).
   */
  private async startProgram(row: AgentRow, p: Principal, sandboxId: string, access?: { key: string; gateway: string }): Promise<void> {
    const t = templateFor(row.template);
    const { key, gateway } = access ?? (await this.gatewayAccess(row, p, sandboxId));
    const secrets = this.core.secrets(row);
    const sandboxes = this.core.s.sandboxes;
    await sandboxes.work.file(p, sandboxId, 'write', { path: PROGRAM_SECRETS, content: JSON.stringify({ token: secrets.token, llmKey: key, gateway }) });
    await sandboxes.work.bgStart(p, sandboxId, {
      command: `exec node ${PROGRAM_PATH}`,
      cwd: WORKSPACE,
      env: {
        ...secrets.env,
        NUBE_AGENT_PORT: String(AGENT_PORT),
        NUBE_AGENT_KIND: t.kind,
        NUBE_AGENT_WORKSPACE: WORKSPACE,
        NUBE_AGENT_SECRETS: PROGRAM_SECRETS,
      },
    });
  }

  /** The agent program is no longer running in its (living) sandbox: start it again on the same disk. */
  async restartIfEnded(row: AgentRow): Promise<boolean> {
    if (!row.sandbox_id) return false;
    const p = await this.core.principalOf(row);
    const { processes } = await this.core.s.sandboxes.work.bgList(p, row.sandbox_id);
    const mine = processes.filter((x) => x.command.includes(PROGRAM_PATH));
    if (mine.some((x) => x.state === 'running')) return false;
    this.core.deps.log.warn({ agent: row.id, exitCode: mine.at(-1)?.exitCode }, 'the agent program had ended; started again');
    await this.startProgram(row, p, row.sandbox_id);
    return true;
  }

  /** A sandbox created while its template builds answers `starting`; its provisioning job starts it. */
  private async waitRunning(p: Principal, sandboxId: string): Promise<void> {
    const until = Date.now() + 30 * 60_000;
    for (;;) {
      const v = await this.core.s.sandboxes.get(p, sandboxId);
      if (v.status === 'running') return;
      // A sandbox that could not start (its template failed to build) says why; no use waiting.
      if (v.status === 'failed') throw new Error(`the agent's sandbox could not start: ${v.error ?? 'unknown reason'}`);
      if (Date.now() > until) throw new Error('the sandbox did not start within 30 minutes');
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** The open ACP connection to the agent, (re)established when needed. */
}
