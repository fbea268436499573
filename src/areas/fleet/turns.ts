// A fleet turn: admitted by the pool (now, queued, or 503), recorded as a durable row, run on the
// conversation's box (or moved to another with its transcript), kept in the conversation store, and
// ended with exactly one outcome event. Queued and interrupted turns are run again after a restart.
import type { SessionUpdate } from '@agentclientprotocol/sdk';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { AgentsService } from '../agents/facade.js';
import type { McpInput } from '../agents/service.js';
import type { TurnUsage } from '../agents/turns.js';
import { KeyedLock } from '../sandboxes/runtime/keyed-lock.js';
import type { PlatformDeps } from '../deps.js';
import type { Signer } from './cursor.js';
import { emitTurnOutcome } from './events.js';
import type { Box, Pools } from './pool.js';
import { type ConversationRow, type FleetAgentRow, type FleetRepo, type FleetTurnRow, type MessageRow, newConversation } from './repo.js';
import { type FleetAdmin, fleetFull } from './service.js';

export interface MessageInput {
  configGroupId?: string;
  groupId: string;
  text: string;
  senderName?: string;
  /** Set by channels (not the API): the channel's id of this message, recorded once. */
  externalId?: string;
}

export type StreamEvent =
  | { type: 'chunk'; value: string }
  | { type: 'tool'; id: string; title: string | null; status: string | null }
  | ({ type: 'usage' } & TurnUsage)
  | { type: 'capacity'; retryAfter: number; queued: boolean }
  | { type: 'error'; code: string; message: string }
  | { type: 'done'; value: string; turnId: string; cursor: string | null; memoryReset: boolean };

export interface TurnResult {
  turnId: string;
  reply: string;
  cursor: string;
  memoryReset: boolean;
  error: { code: string; message: string } | null;
}

const NO_CONNECTORS = 'no configGroupId: the turn ran with no connectors and no group prompt';
/** A turn's box failing before a word (these codes) is replaced this many times before the turn fails. */
const BOX_RETRIES = 2;
const BOX_FAILURES = new Set(['AgentUnavailable', 'ReviveFailed', 'AgentNotReady', 'GatewayUnreachable', 'WorkerError']);

export class FleetTurns {
  /** One turn at a time per conversation, in arrival order. */
  private readonly conv = new KeyedLock();
  /**
   * Set when nube shuts down: a turn failing then failed because of the shutdown (its box connection
   * closed), so it is left unfinished for the next start to run again instead of ending as turn.failed.
   */
  private stopping = false;

  stop(): void {
    this.stopping = true;
  }

  /** Channels that send a reply back themselves (Telegram): called once per completed turn. */
  private readonly deliverers: ((fleet: FleetAgentRow, groupId: string, reply: string) => Promise<void>)[] = [];

  onReply(deliver: (fleet: FleetAgentRow, groupId: string, reply: string) => Promise<void>): void {
    this.deliverers.push(deliver);
  }

  constructor(
    private readonly repo: FleetRepo,
    private readonly admin: FleetAdmin,
    private readonly pools: Pools,
    private readonly agents: AgentsService,
    private readonly signer: Signer,
    private readonly deps: PlatformDeps,
  ) {}

  private async conversation(fleet: FleetAgentRow, groupId: string): Promise<ConversationRow> {
    const found = await this.repo.conversation(fleet.id, groupId);
    if (found) return found;
    await this.repo.insertConversation(newConversation(fleet, groupId));
    return (await this.repo.conversation(fleet.id, groupId))!;
  }

  /** Checks the config group: the owner's and one this fleet agent accepts (400 otherwise). */
  private async group(fleet: FleetAgentRow, id: string | undefined) {
    if (!id) return null;
    const g = await this.repo.group(id);
    const allowed = JSON.parse(fleet.config_group_ids) as string[];
    if (!g || g.owner_id !== fleet.owner_id || (allowed.length > 0 && !allowed.includes(id))) {
      throw errors.badRequest('unknown configuration group for this fleet agent', [{ path: ['body', 'configGroupId'], message: 'not a configuration group of this fleet agent' }], 'ValidationError');
    }
    return g;
  }

  /**
   * A fleet agent's turns run on the node running its pool (a relayed request lands there). While that
   * node is down the fleet agent moves to a node the scheduler picks: its boxes there are gone (their
   * conversations move to new boxes with their transcript, as when a box is removed). Elsewhere:
   * ElsewhereError, relayed by the REST layer.
   */
  private async home(fleet: FleetAgentRow): Promise<FleetAgentRow> {
    if (await this.deps.nodes.lostReason(fleet.node_id)) {
      const to = await this.agents.nodeForBox(fleet.owner_id);
      if (await this.repo.moveAgent(fleet.id, fleet.node_id, to)) {
        for (const b of await this.repo.boxes(fleet.id)) {
          await this.repo.deleteBox(b.id);
          await this.deleteBoxAgent(fleet.owner_id, b.agent_id);
        }
        this.deps.log.info({ fleetAgent: fleet.id, from: fleet.node_id, to }, 'fleet agent moved off a down node');
      }
      fleet = (await this.repo.agent(fleet.id)) ?? fleet;
    }
    await this.deps.nodes.assertHere(fleet.node_id, 'fleet agent');
    return fleet;
  }

  /**
   * Admits a turn and starts it. Throws 503 FleetFull (no turn exists then). `emit` gets the turn's
   * stream events; the returned promise settles with the outcome (the turn runs on without a client).
   */
  async start(p: Principal, fleetAgentId: string, input: MessageInput, emit: (e: StreamEvent) => void): Promise<{ result: Promise<TurnResult>; warning?: string }> {
    const fleet = await this.home(await this.admin.own(p, fleetAgentId));
    await this.group(fleet, input.configGroupId);
    // The conversation exists (its row) before its first turn: cursors and events name it.
    await this.conversation(fleet, input.groupId);
    const admission = this.pools.admit(fleet.id, fleet.capacity, input.groupId, fleetFull);
    if (admission.eta > 0) emit({ type: 'capacity', retryAfter: admission.eta, queued: true });
    const now = Date.now();
    const turn: FleetTurnRow = {
      id: newId('turn'),
      owner_id: fleet.owner_id,
      fleet_agent_id: fleet.id,
      group_id: input.groupId,
      config_group_id: input.configGroupId ?? null,
      status: 'queued',
      input: input.text,
      sender_name: input.senderName ?? null,
      reply: null,
      error_code: null,
      error_message: null,
      usage: null,
      memory_reset: 0,
      external_id: input.externalId ?? null,
      emitted: 0,
      created_at: now,
      started_at: null,
      finished_at: null,
    };
    try {
      await this.repo.insertTurn(turn);
    } catch (e) {
      void admission.slot.then((box) => this.pools.release(box, false, fleet.capacity)).catch(() => {});
      throw e;
    }
    const result = this.conv.run(`${fleet.id}/${input.groupId}`, () => this.execute(fleet, turn, admission.slot, emit));
    return { result, ...(input.configGroupId ? {} : { warning: NO_CONNECTORS }) };
  }

  private async execute(fleet: FleetAgentRow, turn: FleetTurnRow, slot: Promise<Box>, emit: (e: StreamEvent) => void): Promise<TurnResult> {
    // The box the turn holds now (it may change: a box that fails is given up for another).
    const held: { box: Box | null } = { box: null };
    let ran = false;
    try {
      held.box = await slot;
      const started = Date.now();
      await this.repo.updateTurn(turn.id, { status: 'running', started_at: started });
      turn.started_at = started;
      const result = await this.runOnBox(fleet, turn, held, emit);
      ran = true;
      return result;
    } catch (e) {
      // The box could not be built or reached at all: the turn ends with no reply.
      const err = e instanceof ApiError ? { code: e.code, message: e.message } : { code: 'WorkerError', message: (e as Error).message };
      // Recording can fail too (the fleet agent was deleted meanwhile): the caller still gets the error.
      return this.finish(fleet, turn, '', null, false, err, emit).catch(() => {
        emit({ type: 'error', ...err });
        return { turnId: turn.id, reply: '', cursor: '', memoryReset: false, error: err };
      });
    } finally {
      if (held.box) this.pools.release(held.box, ran, fleet.capacity);
    }
  }

  /** Gives up the turn's box (gone, or failing before a word) and waits for another: an accepted turn waits, never 503. */
  private async swapBox(fleet: FleetAgentRow, turn: FleetTurnRow, held: { box: Box | null }): Promise<Box> {
    const old = held.box!;
    held.box = null;
    await this.forgetBox(old, fleet.capacity);
    held.box = await this.pools.queue(fleet.id, fleet.capacity, turn.group_id);
    return held.box;
  }

  private async runOnBox(fleet: FleetAgentRow, turn: FleetTurnRow, held: { box: Box | null }, emit: (e: StreamEvent) => void): Promise<TurnResult> {
    let box = held.box!;
    // A box whose agent is gone (sandbox expired, deleted) leaves the pool; the turn takes another.
    for (let tries = 0; ; tries++) {
      const status = await this.agents.boxStatus(box.agentId);
      if (status === 'running' || status === 'building' || tries >= 2) break;
      box = await this.swapBox(fleet, turn, held);
    }
    const group = turn.config_group_id ? await this.repo.group(turn.config_group_id) : null;
    const mcpServers: McpInput[] = group ? this.admin.mcpOf(group) : [];
    for (let attempt = 0; ; attempt++) {
      await this.repo.touchBox(box.id, Date.now());
      const conv = (await this.repo.conversation(fleet.id, turn.group_id))!;
      const sameBox = conv.box_id === box.id && conv.agent_session_id !== null;
      const prompt = sameBox ? turn.input : await this.firstPrompt(fleet, conv, group?.prompt ?? '', turn);
      if (!(await this.repo.hasUserMessage(turn.id))) {
        await this.repo.append(fleet.id, turn.group_id, [{ id: newId('msg'), role: 'user', text: turn.input, turn_id: turn.id, created_at: Date.now() }]);
      }
      let reply = '';
      let usage: TurnUsage | null = null;
      const out = await this.agents.boxTurn(
        box.agentId,
        sameBox ? conv.agent_session_id : null,
        prompt,
        (e) => {
          if (e.type === 'chunk') {
            reply += e.value;
            emit(e);
          } else if (e.type === 'usage') {
            usage = { model: e.model, inputTokens: e.inputTokens, outputTokens: e.outputTokens, toolCalls: e.toolCalls };
            emit(e);
          }
        },
        { mcpServers, onUpdate: (u) => toolEvent(u, emit) },
      );
      const text = out.outcome.text || reply;
      // A box that failed before a word (it could not be built, did not answer, could not reach the
      // gateway) is the platform's failure, not the turn's: it is given up and the turn waits for another.
      if (!text && attempt < BOX_RETRIES && BOX_FAILURES.has(out.outcome.error?.code ?? '') && !this.stopping) {
        this.deps.log.warn({ turn: turn.id, box: box.id, error: out.outcome.error }, 'fleet box failed before answering; the turn goes to another box');
        box = await this.swapBox(fleet, turn, held);
        continue;
      }
      await this.repo.updateConversation(fleet.id, turn.group_id, { box_id: box.id, agent_session_id: out.session });
      const error = text ? null : (out.outcome.error ?? { code: 'NoReply', message: 'the agent ended without a reply' });
      // Blank memory: the box was rebuilt under the session, or the conversation moved with no transcript.
      const blank = out.memoryLost || (!sameBox && conv.last_seq > 0 && this.deps.config.fleet.carryMessages === 0);
      return this.finish(fleet, turn, text, usage ?? out.outcome.usage, blank, error, emit);
    }
  }

  /**
   * The first prompt of a session: instructions, the group's prompt and the transcript carried over,
   * then this turn's message once (a turn run again after a crash finds its message kept already: it is
   * not part of what came earlier).
   */
  private async firstPrompt(fleet: FleetAgentRow, conv: ConversationRow, groupPrompt: string, turn: FleetTurnRow): Promise<string> {
    const parts: string[] = [];
    if (fleet.instructions) parts.push(fleet.instructions);
    if (groupPrompt) parts.push(groupPrompt);
    const carry = this.deps.config.fleet.carryMessages;
    if (carry > 0 && conv.last_seq > 0) {
      const earlier = await this.repo.tail(fleet.id, conv.group_id, carry, turn.id);
      if (earlier.length) parts.push(`Earlier in this conversation:\n${earlier.map((m) => `${m.role}: ${m.text}`).join('\n')}`);
    }
    if (!parts.length) return turn.input;
    return `${parts.join('\n\n')}\n\nuser: ${turn.input}`;
  }

  private async finish(
    fleet: FleetAgentRow,
    turn: FleetTurnRow,
    reply: string,
    usage: TurnUsage | null,
    memoryLost: boolean,
    error: { code: string; message: string } | null,
    emit: (e: StreamEvent) => void,
  ): Promise<TurnResult> {
    const now = Date.now();
    const completed = reply.length > 0;
    if (!completed && this.stopping) {
      const interrupted = { code: 'Interrupted', message: 'nube is restarting; the turn runs again at its next start' };
      emit({ type: 'error', ...interrupted });
      return { turnId: turn.id, reply: '', cursor: '', memoryReset: false, error: interrupted };
    }
    let lastSeq = (await this.repo.conversation(fleet.id, turn.group_id))?.last_seq ?? 0;
    if (completed) lastSeq = await this.repo.append(fleet.id, turn.group_id, [{ id: newId('msg'), role: 'assistant', text: reply, turn_id: turn.id, created_at: now }]);
    // The model started blank although the conversation had earlier messages: readers with an older
    // cursor get gap context_reset.
    const memoryReset = memoryLost || (turn.memory_reset === 1);
    if (memoryLost) await this.repo.updateConversation(fleet.id, turn.group_id, { reset_seq: Math.max(1, lastSeq - (completed ? 1 : 0)), reset_at: now });
    const patch: Partial<FleetTurnRow> = {
      status: completed ? 'completed' : 'failed',
      reply: completed ? reply : null,
      error_code: completed ? null : (error?.code ?? 'NoReply'),
      error_message: completed ? null : (error?.message ?? 'no reply'),
      usage: usage ? JSON.stringify(usage) : null,
      memory_reset: memoryReset ? 1 : 0,
      finished_at: now,
    };
    await this.repo.updateTurn(turn.id, patch);
    const row = { ...turn, ...patch } as FleetTurnRow;
    const conv = await this.repo.conversation(fleet.id, turn.group_id);
    const cfg = this.deps.config.fleet;
    if (conv) {
      // Trimmed by length, or by age (the oldest kept message is one indexed lookup).
      const [oldest] = await this.repo.messages(fleet.id, turn.group_id, conv.first_seq - 1, 1);
      const tooOld = oldest !== undefined && oldest.created_at < now - cfg.transcriptMaxAgeMs;
      if (tooOld || conv.last_seq - conv.first_seq + 1 > cfg.transcriptMaxMessages) {
        await this.repo.trim(fleet.id, turn.group_id, conv.last_seq, cfg.transcriptMaxMessages, now - cfg.transcriptMaxAgeMs);
      }
    }
    await emitTurnOutcome(this.deps.events, this.repo, this.signer, row, { agentName: fleet.name, sessionUuid: conv?.session_uuid ?? '', lastSeq });
    for (const d of this.deliverers) {
      if (completed) void d(fleet, turn.group_id, reply).catch((e: unknown) => this.deps.log.warn({ err: e, turn: turn.id }, 'channel delivery failed'));
    }
    const cursor = this.signer.cursor(fleet.id, turn.group_id, lastSeq);
    if (!completed && error) emit({ type: 'error', ...error });
    emit({ type: 'done', value: reply, turnId: turn.id, cursor, memoryReset });
    return { turnId: turn.id, reply, cursor, memoryReset, error: completed ? null : error };
  }

  /**
   * A message that is not a turn's (a broadcast) added to a conversation, between its turns (the same
   * lock), once: an id already there is not added again.
   */
  async appendOutOfTurn(fleet: FleetAgentRow, groupId: string, m: Omit<MessageRow, 'seq' | 'fleet_agent_id' | 'group_id'>): Promise<void> {
    await this.conv.run(`${fleet.id}/${groupId}`, async () => {
      if (!(await this.repo.hasMessage(fleet.id, groupId, m.id))) await this.repo.append(fleet.id, groupId, [m]);
    });
  }

  async forgetBox(box: Box, capacity: number): Promise<void> {
    this.pools.drop(box, capacity);
    await this.repo.deleteBox(box.id);
    await this.deleteBoxAgent(box.ownerId, box.agentId);
  }

  async deleteBoxAgent(ownerId: string, agentId: string): Promise<void> {
    await this.agents.deleteBox(ownerId, agentId).catch((e: unknown) => this.deps.log.warn({ err: e, agent: agentId }, 'fleet box agent not deleted'));
  }

  /** After a restart: finished turns whose event was not sent are sent; queued and running ones run again. */
  async recover(): Promise<void> {
    // This node's fleet agents only: the others' turns run on (or are recovered by) their nodes.
    const mine = new Set(await this.repo.agentIdsOn(this.deps.nodes.id));
    for (const t of (await this.repo.unemitted()).filter((x) => mine.has(x.fleet_agent_id))) {
      const fleet = await this.repo.agent(t.fleet_agent_id);
      const conv = await this.repo.conversation(t.fleet_agent_id, t.group_id);
      if (fleet) await emitTurnOutcome(this.deps.events, this.repo, this.signer, t, { agentName: fleet.name, sessionUuid: conv?.session_uuid ?? '', lastSeq: conv?.last_seq ?? 0 });
    }
    for (const t of (await this.repo.unfinished()).filter((x) => mine.has(x.fleet_agent_id))) {
      const fleet = await this.repo.agent(t.fleet_agent_id);
      if (!fleet) continue;
      // Not admitted again through 503: it was accepted before the restart, so it waits for a slot.
      const slot = this.pools.queue(fleet.id, fleet.capacity, t.group_id);
      void this.conv.run(`${fleet.id}/${t.group_id}`, () => this.execute(fleet, t, slot, () => {})).catch((e: unknown) => this.deps.log.warn({ err: e, turn: t.id }, 'fleet turn retry failed'));
    }
  }
}

function toolEvent(u: SessionUpdate, emit: (e: StreamEvent) => void): void {
  if (u.sessionUpdate === 'tool_call') emit({ type: 'tool', id: u.toolCallId, title: u.title ?? null, status: u.status ?? null });
  else if (u.sessionUpdate === 'tool_call_update') emit({ type: 'tool', id: u.toolCallId, title: u.title ?? null, status: u.status ?? null });
}
