// What the operations call: the lifecycle core plus turns (message, try, transcript) and revive.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { runPinned } from '../../platform/nodes.js';
import { capKeyId } from '../../platform/usage.js';
import { Channel } from './channel.js';
import { templateFor } from './templates.js';
import type { AgentStatus, SessionRow } from './repo.js';
import type { AgentsCore, McpInput } from './service.js';
import { type TurnEvent, type TurnOptions, type TurnOutcome, Turns } from './turns.js';

type SessionHolder = SessionRow['holder'];

/** Whose sessions a caller reaches: an embed token's callers (a page's visitors) only their own. */
const holderOf = (p: Principal): SessionHolder => (p.scheme === 'agent' ? 'embed' : 'owner');

/** Turn events as SSE lines; the turn runs on when the reader goes away (the transcript keeps it). */
async function* sse(events: AsyncIterable<TurnEvent>): AsyncGenerator<string> {
  for await (const e of events) yield `data: ${JSON.stringify(e)}\n\n`;
}

export class AgentsService {
  readonly turns: Turns;

  constructor(readonly core: AgentsCore) {
    this.turns = new Turns(core);
  }

  /**
   * The caller's agent for a turn or its transcript: the agent runs commands in its box at a turn's
   * word, so a scoped key must cover the key nube minted for it (its NUBE_API_KEY), as for the box itself.
   */
  private async reach(p: Principal, id: string) {
    const row = await this.core.own(p, id);
    if (p.scope) await this.core.s.account.assertCovers(p, `agent:${row.id}`, `agent ${row.id}`);
    return row;
  }

  async message(p: Principal, id: string, body: { content: string; session?: string }): Promise<AsyncIterable<string>> {
    const row = await this.reach(p, id);
    // Its node's (relayed there), or, while that node is down, the node a revive moves it to.
    await this.core.home(row);
    await this.core.deps.usage.assertKeyCaps(p, ['llmTokens']);
    return runPinned(() => this.messageHere(row, body, holderOf(p), capKeyId(p)));
  }

  private async messageHere(
    row: Awaited<ReturnType<AgentsCore['own']>>,
    body: { content: string; session?: string },
    holder: SessionHolder,
    keyId: string | null,
  ): Promise<AsyncIterable<string>> {
    const session = await this.turns.session(row, body.session, false, holder);
    const channel = new Channel<TurnEvent>();
    this.turns
      .run(row, session, body.content, (e) => channel.push(e), { keyId })
      .catch((e: unknown) => channel.push({ type: 'error', code: 'InternalError', message: (e as Error).message }))
      .finally(() => {
        channel.push({ type: 'done', session: session.id });
        channel.end();
      });
    return sse(channel);
  }

  async try(p: Principal, id: string, body: { text: string; session?: string; reset?: boolean }) {
    const row = await this.reach(p, id);
    await this.core.home(row);
    await this.core.deps.usage.assertKeyCaps(p, ['llmTokens']);
    return runPinned(() => this.turns.tryTurn(row, body.text, body.session, body.reset, holderOf(p), capKeyId(p)));
  }

  async revive(p: Principal, id: string) {
    const row = await this.core.revive(await this.core.own(p, id));
    if (!row.sandbox_id) throw errors.internal();
    return { agentId: row.id, sandboxId: row.sandbox_id, status: row.status, wsUrl: this.core.wsUrl(row.id) };
  }

  async transcript(p: Principal, id: string, session?: string, limit?: number) {
    return this.turns.transcript(await this.reach(p, id), session, limit);
  }

  // Fleet boxes: the fleet's pool runs its conversations on ordinary agents of the owner (ACP template),
  // each conversation one session of a box. The fleet calls these, never the agents' tables.

  /** The node the scheduler picks for the owner's next box (a fleet agent's pool runs there). */
  nodeForBox(ownerId: string): Promise<string> {
    return this.core.s.sandboxes.nodeFor(ownerId, templateFor('acp').sandboxTemplate);
  }

  /** A new box for the owner: an ACP agent (counted in the plan's simultaneous agents); its id. */
  async createBox(ownerId: string, name: string): Promise<string> {
    const p = await this.core.principalOf({ owner_id: ownerId });
    // On this node: the fleet agent's pool, which talks to its boxes, lives here.
    return (await runPinned(() => this.core.create(p, { template: 'acp', env: {}, name }))).id;
  }

  /** The box's status (its sandbox checked), or null when the agent is gone. */
  async boxStatus(agentId: string): Promise<AgentStatus | null> {
    const row = await this.core.repo.get(agentId);
    if (!row) return null;
    return (await this.core.refresh(row)).status;
  }

  /**
   * One turn on a box, in its session `sessionId` (a new session when null). `memoryLost`: the session
   * had a model memory before and the turn ran in a fresh one (the box was rebuilt underneath).
   */
  async boxTurn(
    agentId: string,
    sessionId: string | null,
    text: string,
    emit: (e: TurnEvent) => void,
    opts: TurnOptions & { mcpServers: McpInput[] },
  ): Promise<{ session: string; outcome: TurnOutcome; memoryLost: boolean }> {
    const row = await this.core.repo.get(agentId);
    if (!row) throw errors.notFound('agent');
    const session = sessionId ? ((await this.core.repo.session(sessionId)) ?? (await this.turns.session(row, undefined, true))) : await this.turns.session(row, undefined, true);
    const before = session.acp_session_id;
    const outcome = await this.turns.run(row, session, text, emit, opts);
    const after = (await this.core.repo.session(session.id))?.acp_session_id ?? null;
    return { session: session.id, outcome, memoryLost: before !== null && after !== before };
  }

  async deleteBox(ownerId: string, agentId: string): Promise<void> {
    const p = await this.core.principalOf({ owner_id: ownerId });
    await this.core.delete(p, agentId).catch((e: unknown) => {
      if (!(e instanceof Error && 'status' in e && e.status === 404)) throw e;
    });
  }
}
