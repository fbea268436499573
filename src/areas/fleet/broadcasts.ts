// Broadcasts: one message from the owner to every conversation of a fleet agent's channels, as a
// durable job. A web conversation gets it in its transcript (the widget shows it on its next read); a
// Telegram chat gets it with sendMessage, at most 30 messages a second (Telegram's limit for a bot),
// waiting `retry_after` when Telegram answers 429. Progress (the last conversation done, counts) is
// written after each one, so a restart goes on where it stopped: a web conversation never gets the
// message twice (its message id is the broadcast's), a Telegram chat at most the one in flight.
// `broadcast.sent` goes out through the outbox with the counts, in the transaction that marks it sent.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cutShort, type JobContext } from '../../platform/jobs-contract.js';
import type { PlatformDeps } from '../deps.js';
import type { BroadcastRow, FleetAgentRow, FleetRepo } from './repo.js';
import type { FleetAdmin } from './service.js';
import { TELEGRAM_PREFIX, type TelegramChannel } from './telegram.js';
import type { FleetTurns } from './turns.js';

export const BROADCAST_JOB = 'fleet.broadcast';
/** Telegram's limit for one bot: about 30 messages a second. */
const TELEGRAM_GAP_MS = 1000 / 30;
/** Tries of one Telegram message answered 429 before it counts as failed. */
const TELEGRAM_TRIES = 5;
const PAGE = 100;

const iso = (ms: number | string | null) => (ms === null ? null : new Date(Number(ms)).toISOString());

export class Broadcasts {
  constructor(
    private readonly repo: FleetRepo,
    private readonly admin: FleetAdmin,
    private readonly turns: FleetTurns,
    private readonly telegram: TelegramChannel,
    private readonly deps: PlatformDeps,
  ) {}

  view(b: BroadcastRow) {
    return {
      id: b.id,
      fleetAgentId: b.fleet_agent_id,
      text: b.text,
      status: b.status,
      total: Number(b.total),
      sent: Number(b.sent),
      failed: Number(b.failed),
      createdAt: iso(b.created_at)!,
      finishedAt: iso(b.finished_at),
    };
  }

  /** The conversations a broadcast of this fleet agent reaches now: web ones, and Telegram chats while a bot is connected. */
  private channelsOf(fleet: FleetAgentRow): { web: boolean; telegram: boolean } {
    const channels = JSON.parse(fleet.channels) as string[];
    return { web: channels.includes('web'), telegram: channels.includes('telegram') && fleet.telegram_sealed !== null };
  }

  async create(p: Principal, fleetAgentId: string, text: string) {
    const fleet = await this.admin.own(p, fleetAgentId);
    const reach = this.channelsOf(fleet);
    const total = await this.repo.countRecipients(fleet.id, reach);
    if (total === 0) {
      throw errors.badRequest(
        'this fleet agent has no conversation to broadcast to yet (web conversations, and Telegram chats while a bot is connected)',
        [{ path: ['params', 'fleetAgentId'], message: 'no conversations on its channels' }],
        'NoRecipients',
      );
    }
    const now = Date.now();
    const row: BroadcastRow = {
      id: newId('bc'),
      owner_id: fleet.owner_id,
      fleet_agent_id: fleet.id,
      text,
      status: 'sending',
      total,
      sent: 0,
      failed: 0,
      cursor: '',
      created_at: now,
      finished_at: null,
    };
    await this.repo.insertBroadcast(row, (db) => this.deps.jobs.enqueue(this.deps.nodes.jobType(BROADCAST_JOB, fleet.node_id), { id: row.id }, { key: `broadcast:${row.id}`, db }));
    return this.view(row);
  }

  async get(p: Principal, fleetAgentId: string, id: string) {
    await this.admin.own(p, fleetAgentId);
    const b = await this.repo.broadcast(id);
    if (!b || b.fleet_agent_id !== fleetAgentId) throw errors.notFound('broadcast');
    return this.view(b);
  }

  async list(p: Principal, fleetAgentId: string) {
    await this.admin.own(p, fleetAgentId);
    return { items: (await this.repo.broadcasts(fleetAgentId)).map((b) => this.view(b)) };
  }

  /** The job: every conversation after the cursor, in group id order, then `broadcast.sent`. */
  async run(id: string, job: JobContext): Promise<void> {
    let b = await this.repo.broadcast(id);
    if (b?.status !== 'sending') return;
    const fleet = await this.repo.agent(b.fleet_agent_id);
    if (!fleet) return;
    const reach = this.channelsOf(fleet);
    let last = 0;
    for (;;) {
      const page = await this.repo.recipients(fleet.id, reach, b.cursor, PAGE);
      for (const groupId of page) {
        if (cutShort(job)) throw new Error('cut by nube\'s stop; the broadcast goes on at its next start');
        let ok: boolean;
        if (groupId.startsWith(TELEGRAM_PREFIX)) {
          await sleepUntil(last + TELEGRAM_GAP_MS);
          ok = await this.toTelegram(fleet, groupId, b.text, job);
          last = Date.now();
        } else {
          ok = await this.turns.appendOutOfTurn(fleet, groupId, { id: `${b.id}.${groupId}`, role: 'assistant', text: b.text, turn_id: null, created_at: Date.now() }).then(
            () => true,
            (e: unknown) => {
              this.deps.log.warn({ err: e, broadcast: b!.id, groupId }, 'broadcast to a web conversation failed');
              return false;
            },
          );
        }
        b = { ...b, cursor: groupId, sent: Number(b.sent) + (ok ? 1 : 0), failed: Number(b.failed) + (ok ? 0 : 1) };
        await this.repo.updateBroadcast(b.id, { cursor: b.cursor, sent: b.sent, failed: b.failed });
      }
      if (page.length < PAGE) break;
    }
    const done = { ...b, status: 'sent' as const, finished_at: Date.now() };
    await this.deps.events.atomically(async (trx, emit) => {
      await this.repo.updateBroadcast(b!.id, { status: 'sent', finished_at: done.finished_at }, trx);
      emit({ event: 'broadcast.sent', ownerId: b!.owner_id, data: this.view(done) });
    });
  }

  /** One Telegram message, waiting out 429s (`retry_after`); false when Telegram refused it for good. */
  private async toTelegram(fleet: FleetAgentRow, groupId: string, text: string, job: JobContext): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      const r = await this.telegram.send(fleet, groupId, text);
      if (r.ok) return true;
      if (r.retryAfter === undefined || attempt >= TELEGRAM_TRIES || cutShort(job)) {
        this.deps.log.warn({ fleetAgent: fleet.id, groupId, why: r.why }, 'broadcast to a Telegram chat failed');
        return false;
      }
      await new Promise((res) => setTimeout(res, r.retryAfter! * 1000));
    }
  }
}

function sleepUntil(at: number): Promise<void> {
  const ms = at - Date.now();
  return ms > 0 ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve();
}
