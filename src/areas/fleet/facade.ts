// What the fleet's operations call: management (FleetAdmin), turns (message, message-stream) and reads.
import type { Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { Channel } from '../agents/channel.js';
import { type MessagesQuery, readMessages } from './conversations.js';
import type { Signer } from './cursor.js';
import type { Broadcasts } from './broadcasts.js';
import type { Pools } from './pool.js';
import type { FleetRepo } from './repo.js';
import type { FleetAdmin } from './service.js';
import type { TelegramChannel } from './telegram.js';
import type { FleetTurns, MessageInput, StreamEvent } from './turns.js';

export class FleetService {
  constructor(
    readonly admin: FleetAdmin,
    readonly turns: FleetTurns,
    readonly pools: Pools,
    readonly repo: FleetRepo,
    readonly signer: Signer,
    readonly telegram: TelegramChannel,
    readonly broadcasts: Broadcasts,
  ) {}

  /** POST /message: waits for the turn; a turn with no reply answers its error (402 balance, else 502). */
  async message(p: Principal, id: string, input: MessageInput) {
    const { result, warning } = await this.turns.start(p, id, input, () => {});
    const r = await result;
    if (r.error) {
      const status = r.error.code === 'InsufficientBalance' ? 402 : 502;
      throw new ApiError(status, r.error.code, r.error.message, { turnId: r.turnId });
    }
    return { reply: r.reply, turnId: r.turnId, cursor: r.cursor, memoryReset: r.memoryReset, ...(warning ? { warning } : {}) };
  }

  /** POST /message-stream: SSE; a full fleet is a `capacity` event (not a failure) and the stream ends. */
  async messageStream(p: Principal, id: string, input: MessageInput): Promise<AsyncIterable<string>> {
    const channel = new Channel<StreamEvent>();
    try {
      const { result } = await this.turns.start(p, id, input, (e) => channel.push(e));
      result.catch(() => {}).finally(() => channel.end());
    } catch (e) {
      if (!(e instanceof ApiError && e.code === 'FleetFull')) throw e;
      channel.push({ type: 'capacity', retryAfter: Number(e.extra.retryAfter), queued: false });
      channel.end();
    }
    return (async function* () {
      for await (const e of channel) yield `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
    })();
  }

  async messages(p: Principal, id: string, q: MessagesQuery) {
    // A token or public key was resolved from its fleet agent (it names it): no second lookup on this hot path.
    const scoped = (p.scheme === 'fleetAgent' || p.scheme === 'fleetPublic') && p.resourceId === id;
    if (!scoped) await this.admin.own(p, id);
    return readMessages(this.repo, this.signer, p, id, q);
  }

  async deleteAgent(p: Principal, id: string) {
    const row = await this.admin.own(p, id);
    if (row.telegram_sealed) await this.telegram.disconnect(p, id);
    this.pools.remove(id);
    for (const b of await this.repo.boxes(id)) await this.turns.deleteBoxAgent(row.owner_id, b.agent_id);
    this.admin.forget(id);
    await this.repo.deleteAgent(id);
    return { ok: true as const };
  }
}
