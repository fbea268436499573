// Turns: one message to an agent in one of its sessions, streamed as it comes and kept in the
// transcript. One turn at a time per session: later messages wait in order (a KeyedLock is a FIFO per
// key); `try` refuses with 409 `turno_en_curso` instead. A turn does not depend on its HTTP client: a
// client that hangs up stops receiving, the turn finishes and its reply is in the transcript.
import type { SessionUpdate } from '@agentclientprotocol/sdk';
import { ApiError, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { KeyedLock } from '../sandboxes/runtime/keyed-lock.js';
import type { AgentRow, SessionRow, TurnRow } from './repo.js';
import { acpMcpServers, type AgentsCore, type McpInput } from './service.js';
import { WORKSPACE } from './templates.js';

export interface TurnUsage {
  model: string | null;
  inputTokens: number;
  outputTokens: number;
  toolCalls: number;
}

export type TurnEvent =
  | { type: 'chunk'; value: string }
  | { type: 'usage'; model: string | null; inputTokens: number; outputTokens: number; toolCalls: number }
  | { type: 'error'; code: string; message: string }
  | { type: 'done'; session?: string };

export interface TurnOutcome {
  turnId: string;
  session: string;
  text: string;
  error: { code: string; message: string } | null;
  usage: TurnUsage | null;
  ms: number;
}

/** What the fleet adds to a turn: its configuration group's connectors, and the other ACP updates (tool calls). */
export interface TurnOptions {
  mcpServers?: McpInput[];
  onUpdate?: (u: SessionUpdate) => void;
  /** The scoped key (with caps) that started the turn: its LLM tokens count toward that key's cap. */
  keyId?: string | null;
}

const TRY_WAIT_MS = 180_000;
/** How often a running turn's output so far is written: a turn cut by a crash keeps what it had produced. */
const OUTPUT_FLUSH_MS = 500;
export const INTERRUPTED = { code: 'Interrupted', message: 'nube restarted during this turn: the reply was cut where it stopped' };

export class Turns {
  private readonly queue = new KeyedLock();
  /** Turns queued or running per session (this process). */
  private readonly pending = new Map<string, number>();
  /** Running turns: each one's write of its output so far. */
  private readonly live = new Map<string, () => Promise<void>>();
  /** Set when nube stops: a turn failing from then on was cut by the stop, not by the agent. */
  private stopping = false;

  /** nube is stopping: running turns write what they produced, and end as Interrupted. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.live.values()].map((flush) => flush()));
  }

  constructor(private readonly core: AgentsCore) {}

  /**
   * The session a turn goes to: the given one (404 if it is not this agent's), a new one, or the
   * owner's default (a reset makes the new one the default). An embed caller (`holder` embed: a page's
   * visitor) never reaches the owner's sessions: without `id` it gets a new session of its own, and an
   * `id` it may continue is one an embed caller opened (another is a 404, like one that does not exist).
   */
  async session(row: AgentRow, id?: string, reset?: boolean, holder: SessionRow['holder'] = 'owner'): Promise<SessionRow> {
    const repo = this.core.repo;
    if (id && !reset) {
      const s = await repo.session(id);
      if (!s || s.agent_id !== row.id || (holder === 'embed' && s.holder !== 'embed')) throw errors.notFound('session');
      return s;
    }
    if (holder === 'owner' && !reset && row.default_session_id) {
      const s = await repo.session(row.default_session_id);
      if (s) return s;
    }
    const s: SessionRow = { id: newId('ses'), agent_id: row.id, owner_id: row.owner_id, acp_session_id: null, holder, created_at: Date.now() };
    await repo.insertSession(s);
    if (holder === 'owner') await repo.update(row.id, { default_session_id: s.id });
    return s;
  }

  busy(sessionId: string): boolean {
    return (this.pending.get(sessionId) ?? 0) > 0;
  }

  /** Queues a turn behind the session's earlier ones; `emit` gets chunks as they stream. */
  async run(row: AgentRow, session: SessionRow, text: string, emit: (e: TurnEvent) => void, opts: TurnOptions = {}): Promise<TurnOutcome> {
    const turn: TurnRow = {
      id: newId('turn'),
      agent_id: row.id,
      session_id: session.id,
      owner_id: row.owner_id,
      status: 'queued',
      input: text,
      output: '',
      error_code: null,
      error_message: null,
      usage: null,
      created_at: Date.now(),
      started_at: null,
      finished_at: null,
      key_id: opts.keyId ?? null,
    };
    this.pending.set(session.id, (this.pending.get(session.id) ?? 0) + 1);
    try {
      await this.core.repo.insertTurn(turn);
      return await this.queue.run(session.id, () => this.execute(row.id, session.id, turn, emit, opts));
    } finally {
      const n = (this.pending.get(session.id) ?? 1) - 1;
      if (n > 0) this.pending.set(session.id, n);
      else this.pending.delete(session.id);
    }
  }

  private async execute(agentId: string, sessionId: string, turn: TurnRow, emit: (e: TurnEvent) => void, opts: TurnOptions): Promise<TurnOutcome> {
    const started = Date.now();
    const repo = this.core.repo;
    await repo.updateTurn(turn.id, { status: 'running', started_at: started });
    let output = '';
    let usage: TurnUsage | null = null;
    let error: TurnOutcome['error'] = null;
    let flushedAt = started;
    let writing = Promise.resolve();
    const flush = () => {
      const text = output;
      writing = writing.then(() => repo.updateTurn(turn.id, { output: text })).catch(() => {});
      return writing;
    };
    this.live.set(turn.id, flush);
    // A connection that breaks because the agent's sandbox just went away (nube had not noticed yet) is
    // tried once more on the revived agent, if nothing was streamed: whatever the turn did in the old
    // sandbox went with its disk. So is one that breaks because the agent program had ended in its
    // living sandbox (the link nube held was dead before its close was seen), if the program reported
    // nothing of this turn: the next link starts the program again. Any other failure is the turn's error.
    let progressed = false;
    for (let attempt = 1; ; attempt++) {
      try {
        const res = await this.prompt(agentId, sessionId, turn.input, {
          ...opts,
          onUpdate: (u) => {
            progressed = true;
            opts.onUpdate?.(u);
          },
        }, (text) => {
          progressed = true;
          output += text;
          emit({ type: 'chunk', value: text });
          if (Date.now() - flushedAt >= OUTPUT_FLUSH_MS) {
            flushedAt = Date.now();
            void flush();
          }
        });
        const u = (res._meta as { usage?: TurnUsage } | undefined)?.usage;
        if (u) usage = { model: u.model ?? null, inputTokens: u.inputTokens ?? 0, outputTokens: u.outputTokens ?? 0, toolCalls: u.toolCalls ?? 0 };
        if (res.stopReason === 'cancelled') error = { code: 'Cancelled', message: 'the turn was cancelled' };
        if (res.stopReason === 'max_turn_requests') error = { code: 'MaxSteps', message: 'the agent stopped after too many tool rounds' };
        break;
      } catch (e) {
        error = this.stopping ? INTERRUPTED : describe(e);
        if (this.stopping) break;
        const row = await repo.get(agentId);
        const fresh = row ? await this.core.refresh(row).catch(() => row) : undefined;
        const programEnded = !progressed && !this.core.connected(agentId);
        if (attempt === 1 && output === '' && error.code === 'AgentUnavailable' && (fresh?.status === 'lost' || programEnded)) {
          error = null;
          continue;
        }
        break;
      }
    }
    this.live.delete(turn.id);
    await writing;
    if (usage) emit({ type: 'usage', ...usage });
    if (error) emit({ type: 'error', ...error });
    const finished = Date.now();
    await repo.updateTurn(turn.id, {
      status: error ? 'failed' : 'done',
      output,
      error_code: error?.code ?? null,
      error_message: error?.message ?? null,
      usage: usage ? JSON.stringify(usage) : null,
      finished_at: finished,
    });
    return { turnId: turn.id, session: sessionId, text: output, error, usage, ms: finished - started };
  }

  /** Makes sure the agent runs (waiting for a build, reviving a lost one), then prompts its ACP session. */
  private async prompt(agentId: string, sessionId: string, input: string, opts: TurnOptions, onText: (t: string) => void) {
    const repo = this.core.repo;
    let row = await repo.get(agentId);
    if (!row) throw errors.notFound('agent');
    // An open connection proves the sandbox is alive; otherwise check it (gone: lost, revived below).
    if (!this.core.connected(row.id)) row = await this.core.refresh(row);
    if (row.status === 'building') row = await this.waitBuilt(agentId);
    if (row.status === 'lost') row = await this.core.revive(row);
    const ready = row;
    const [, link, session] = await Promise.all([this.core.s.llm.assertBalance(ready.owner_id), this.core.link(ready), repo.session(sessionId)]);
    if (!session) throw errors.notFound('session');
    // The fleet passes its configuration group's connectors per session; an agent uses its own.
    const mcp = acpMcpServers(opts.mcpServers ?? this.core.secrets(ready).mcpServers);
    let acpId = session.acp_session_id;
    if (acpId && !(await link.loadSession(acpId, WORKSPACE, mcp))) acpId = null;
    if (!acpId) {
      acpId = await link.newSession(WORKSPACE, mcp);
      await repo.setAcpSession(sessionId, acpId);
    }
    return link.prompt(acpId, input, (u: SessionUpdate) => {
      if (u.sessionUpdate === 'agent_message_chunk' && u.content.type === 'text') onText(u.content.text);
      else opts.onUpdate?.(u);
    });
  }

  private async waitBuilt(agentId: string): Promise<AgentRow> {
    const until = Date.now() + 10 * 60_000;
    for (;;) {
      const row = await this.core.repo.get(agentId);
      if (!row) throw errors.notFound('agent');
      if (row.status !== 'building') return row;
      if (Date.now() > until) throw new ApiError(504, 'AgentNotReady', 'the agent is still building');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** POST /try: the whole reply, waiting up to 180 s. */
  async tryTurn(row: AgentRow, text: string, sessionId?: string, reset?: boolean, holder: SessionRow['holder'] = 'owner', keyId: string | null = null) {
    const session = await this.session(row, sessionId, reset, holder);
    if (this.busy(session.id)) throw errors.conflict('turno_en_curso', 'turno_en_curso', { session: session.id });
    let partial = '';
    const started = Date.now();
    const outcome = this.run(row, session, text, (e) => {
      if (e.type === 'chunk') partial += e.value;
    }, { keyId });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<null>((r) => {
      timer = setTimeout(() => r(null), TRY_WAIT_MS);
    });
    const done = await Promise.race([outcome, timeout]);
    clearTimeout(timer);
    if (!done) {
      if (!partial) throw new ApiError(502, 'AgentNoText', 'the agent produced no text within 180 s (the turn goes on; see its transcript)', { session: session.id });
      return { text: partial, error: 'the turn is still running after 180 s; the rest will be in its transcript', session: session.id, ms: Date.now() - started };
    }
    if (done.error?.code === 'InsufficientBalance') throw errors.paymentRequired(done.error.message, 'InsufficientBalance', { session: session.id });
    if (!done.text) {
      throw new ApiError(502, 'AgentNoText', done.error ? `the agent ended without text: ${done.error.message}` : 'the agent ended without text', {
        session: session.id,
      });
    }
    return { text: done.text, error: done.error?.message ?? null, session: session.id, ms: done.ms };
  }

  async transcript(row: AgentRow, sessionId?: string, limit = 100) {
    const rows = await this.core.repo.turns(row.id, sessionId, limit);
    return {
      turns: rows.reverse().map((t) => ({
        id: t.id,
        session: t.session_id,
        status: t.status,
        input: t.input,
        output: t.output,
        error: t.error_code ? { code: t.error_code, message: t.error_message ?? '' } : null,
        usage: t.usage ? (JSON.parse(t.usage) as TurnUsage) : null,
        createdAt: new Date(Number(t.created_at)).toISOString(),
        finishedAt: t.finished_at ? new Date(Number(t.finished_at)).toISOString() : null,
      })),
    };
  }
}

/** An error of a turn as `{ code, message }`: the gateway's codes (InsufficientBalance...) pass through. */
function describe(e: unknown): { code: string; message: string } {
  if (e instanceof ApiError) return { code: e.code, message: e.message };
  const rpc = e as { code?: number; message?: string; data?: { code?: string } };
  if (rpc?.data?.code) return { code: rpc.data.code, message: rpc.message ?? 'agent error' };
  if (typeof rpc?.code === 'number') return { code: 'AgentError', message: rpc.message ?? 'agent error' };
  return { code: 'AgentUnavailable', message: (e as Error)?.message ?? String(e) };
}
