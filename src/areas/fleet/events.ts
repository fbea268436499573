// The one place turn outcomes leave as events (turn.completed / turn.failed). The event is recorded in
// the outbox in the transaction that marks the turn emitted: exactly once per turn. A turn finished but
// not yet marked (a crash in between) is emitted at the next start (turns.ts, unemitted).
import type { Outbox } from '../../platform/outbox.js';
import type { Signer } from './cursor.js';
import type { FleetRepo, FleetTurnRow } from './repo.js';

const TITLE_MAX = 80;
const SUMMARY_MAX = 180;

const trim = (s: string, max: number) => {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
};

export interface TurnEventContext {
  agentName: string;
  sessionUuid: string;
  lastSeq: number;
}

export async function emitTurnOutcome(events: Outbox, repo: FleetRepo, signer: Signer, turn: FleetTurnRow, ctx: TurnEventContext): Promise<void> {
  const usage = turn.usage ? (JSON.parse(turn.usage) as Record<string, unknown>) : { model: null, inputTokens: 0, outputTokens: 0, toolCalls: 0 };
  const reply = turn.reply ?? '';
  const started = Number(turn.started_at ?? turn.created_at);
  const finished = Number(turn.finished_at ?? Date.now());
  const data: Record<string, unknown> = {
    turnId: turn.id,
    fleetAgentId: turn.fleet_agent_id,
    agentName: ctx.agentName,
    groupId: turn.group_id,
    sessionUuid: ctx.sessionUuid,
    title: trim(ctx.agentName, TITLE_MAX),
    summary: trim(turn.status === 'completed' ? reply : (turn.error_message ?? ''), SUMMARY_MAX),
    replyLength: reply.length,
    cursor: signer.cursor(turn.fleet_agent_id, turn.group_id, ctx.lastSeq),
    memoryReset: turn.memory_reset === 1,
    startedAt: new Date(started).toISOString(),
    finishedAt: new Date(finished).toISOString(),
    durationMs: Math.max(0, finished - started),
    usage,
  };
  if (turn.status === 'failed') data.error = { code: turn.error_code ?? 'TurnFailed', message: turn.error_message ?? 'the turn ended with no reply' };
  await events.atomically(async (trx, emit) => {
    if (await repo.claimEmit(turn.id, trx)) emit({ event: turn.status === 'completed' ? 'turn.completed' : 'turn.failed', ownerId: turn.owner_id, data });
  });
}
