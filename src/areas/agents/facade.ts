// What the operations call: the lifecycle core plus turns (message, try, transcript) and revive.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { AgentsCore } from './service.js';
import { type TurnEvent, Turns } from './turns.js';

/** Turn events as SSE lines; the turn runs on when the reader goes away (the transcript keeps it). */
async function* sse(events: AsyncIterable<TurnEvent>): AsyncGenerator<string> {
  for await (const e of events) yield `data: ${JSON.stringify(e)}\n\n`;
}

/** A one-reader queue: the turn pushes, the HTTP response pulls; nothing blocks the turn. */
class Channel<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  push(item: T) {
    this.items.push(item);
    this.wake?.();
  }
  end() {
    this.ended = true;
    this.wake?.();
  }
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      while (this.items.length) yield this.items.shift()!;
      if (this.ended) return;
      await new Promise<void>((r) => {
        this.wake = r;
      });
      this.wake = null;
    }
  }
}

export class AgentsService {
  readonly turns: Turns;

  constructor(readonly core: AgentsCore) {
    this.turns = new Turns(core);
  }

  async message(p: Principal, id: string, content: string): Promise<AsyncIterable<string>> {
    const row = await this.core.own(p, id);
    const session = await this.turns.session(row);
    const channel = new Channel<TurnEvent>();
    this.turns
      .run(row, session, content, (e) => channel.push(e))
      .catch((e: unknown) => channel.push({ type: 'error', code: 'InternalError', message: (e as Error).message }))
      .finally(() => {
        channel.push({ type: 'done' });
        channel.end();
      });
    return sse(channel);
  }

  async try(p: Principal, id: string, body: { text: string; session?: string; reset?: boolean }) {
    const row = await this.core.own(p, id);
    return this.turns.tryTurn(row, body.text, body.session, body.reset);
  }

  async revive(p: Principal, id: string) {
    const row = await this.core.revive(await this.core.own(p, id));
    if (!row.sandbox_id) throw errors.internal();
    return { agentId: row.id, sandboxId: row.sandbox_id, status: row.status, wsUrl: this.core.wsUrl(row.id) };
  }

  async transcript(p: Principal, id: string, session?: string, limit?: number) {
    return this.turns.transcript(await this.core.own(p, id), session, limit);
  }
}
