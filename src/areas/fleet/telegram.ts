// The Telegram channel (Bot API): connecting a bot registers nube's webhook with `setWebhook` and a
// secret Telegram echoes in `X-Telegram-Bot-Api-Secret-Token`; each text message is a turn in the
// conversation `tg-<chat id>`; its reply goes back with `sendMessage` (split at Telegram's 4096
// characters). A full fleet answers the update 503, so Telegram delivers it again later. Requests leave
// through the one outbound client, the operator's Bot API base (NUBE_TELEGRAM_API_URL) as trusted origin.
import type { FastifyInstance } from 'fastify';
import type { Principal } from '../../platform/auth.js';
import { safeEqual } from '../../platform/crypto.js';
import { ApiError, errors } from '../../platform/errors.js';
import { BASE62, randomToken } from '../../platform/ids.js';
import { ElsewhereError } from '../../platform/nodes.js';
import type { PlatformDeps } from '../deps.js';
import type { FleetAgentRow, FleetRepo } from './repo.js';
import type { FleetAdmin } from './service.js';
import type { FleetTurns } from './turns.js';

export const TELEGRAM_PREFIX = 'tg-';
const MAX_TEXT = 4096;

/** Telegram's refusal of a call: its HTTP status, and `retry_after` when it answered 429. */
class TelegramRefusal extends ApiError {
  constructor(
    readonly upstreamStatus: number,
    message: string,
    readonly retryAfter?: number,
  ) {
    super(502, 'TelegramError', message);
  }
}

interface TelegramSecrets {
  botToken: string;
  secret: string;
}

interface Update {
  update_id?: number;
  message?: { chat?: { id?: number | string }; text?: string; from?: { first_name?: string; username?: string } };
}

export class TelegramChannel {
  constructor(
    private readonly repo: FleetRepo,
    private readonly admin: FleetAdmin,
    private readonly deps: PlatformDeps,
  ) {}

  private get api(): string {
    return this.deps.config.fleet.telegramApiUrl;
  }

  private secrets(row: FleetAgentRow): TelegramSecrets | null {
    return row.telegram_sealed ? (JSON.parse(this.deps.secretBox.open(row.telegram_sealed)) as TelegramSecrets) : null;
  }

  private async call(botToken: string, method: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const res = await this.deps.outbound.request(`${this.api}/bot${botToken}/${method}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      timeoutMs: 15_000,
      trustedOrigin: this.api,
    });
    const text = await res.body.text();
    let parsed: { ok?: boolean; description?: string; parameters?: { retry_after?: number } } = {};
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch {}
    if (res.status !== 200 || parsed.ok !== true) {
      throw new TelegramRefusal(res.status, `Telegram answered ${method} with ${res.status}: ${parsed.description ?? text.slice(0, 200)}`, parsed.parameters?.retry_after);
    }
    return parsed as Record<string, unknown>;
  }

  webhookUrl(fleetAgentId: string): string {
    return `${this.deps.publicUrl()}/api/v2/fleet-channels/telegram/${fleetAgentId}`;
  }

  /** Connects a bot: Telegram is told nube's webhook (and the secret it echoes); `telegram` joins channels. */
  async connect(p: Principal, id: string, botToken: string) {
    const row = await this.admin.own(p, id);
    const secret = randomToken(48, BASE62);
    await this.call(botToken, 'setWebhook', { url: this.webhookUrl(id), secret_token: secret, allowed_updates: ['message'] });
    const channels = [...new Set([...(JSON.parse(row.channels) as string[]), 'telegram'])];
    await this.repo.updateAgent(id, { telegram_sealed: this.deps.secretBox.seal(JSON.stringify({ botToken, secret })), channels: JSON.stringify(channels) });
    return { fleetAgentId: id, channel: 'telegram' as const, webhookUrl: this.webhookUrl(id), channels };
  }

  async disconnect(p: Principal, id: string) {
    const row = await this.admin.own(p, id);
    const s = this.secrets(row);
    if (!s) throw errors.notFound('telegram channel');
    await this.call(s.botToken, 'deleteWebhook', {}).catch((e: unknown) => this.deps.log.warn({ err: e, fleetAgent: id }, 'telegram deleteWebhook failed'));
    const channels = (JSON.parse(row.channels) as string[]).filter((c) => c !== 'telegram');
    await this.repo.updateAgent(id, { telegram_sealed: null, channels: JSON.stringify(channels.length ? channels : ['web']) });
    return { ok: true as const };
  }

  /**
   * One message to a Telegram conversation (a broadcast): `retryAfter` when Telegram answered 429
   * (seconds to wait), `why` when it refused or could not be reached.
   */
  async send(fleet: FleetAgentRow, groupId: string, text: string): Promise<{ ok: true } | { ok: false; retryAfter?: number; why: string }> {
    const s = this.secrets(fleet);
    if (!s) return { ok: false, why: 'no Telegram bot is connected' };
    const chatId = groupId.slice(TELEGRAM_PREFIX.length);
    try {
      for (let i = 0; i < text.length; i += MAX_TEXT) await this.call(s.botToken, 'sendMessage', { chat_id: chatId, text: text.slice(i, i + MAX_TEXT) });
      return { ok: true };
    } catch (e) {
      if (e instanceof TelegramRefusal && e.upstreamStatus === 429) return { ok: false, retryAfter: Math.max(1, e.retryAfter ?? 1), why: e.message };
      return { ok: false, why: (e as Error).message };
    }
  }

  /** A turn's reply in a Telegram conversation goes back to its chat (also for turns rerun after a restart). */
  async deliver(fleet: FleetAgentRow, groupId: string, reply: string): Promise<void> {
    if (!groupId.startsWith(TELEGRAM_PREFIX) || !reply) return;
    const s = this.secrets((await this.repo.agent(fleet.id)) ?? fleet);
    if (!s) return;
    const chatId = groupId.slice(TELEGRAM_PREFIX.length);
    for (let i = 0; i < reply.length; i += MAX_TEXT) await this.call(s.botToken, 'sendMessage', { chat_id: chatId, text: reply.slice(i, i + MAX_TEXT) });
  }

  routes(app: FastifyInstance, turns: FleetTurns): void {
    app.post<{ Params: { id: string }; Body: Update }>('/api/v2/fleet-channels/telegram/:id', async (req, reply) => {
      const row = await this.repo.agent(req.params.id);
      const s = row && this.secrets(row);
      const given = req.headers['x-telegram-bot-api-secret-token'];
      if (!row || !s || typeof given !== 'string' || !safeEqual(given, s.secret)) return reply.code(401).send({ error: 'missing or invalid secret token', code: 'Unauthorized' });
      const m = req.body?.message;
      // Updates other than text messages are acknowledged and ignored (Telegram would resend a non-2xx).
      if (!m?.text || m.chat?.id === undefined || !/^-?\d{1,20}$/.test(String(m.chat.id))) return reply.code(200).send({ ok: true });
      const externalId = req.body.update_id === undefined ? undefined : `tg:${req.body.update_id}`;
      // Telegram delivers an update again when it saw no 2xx in time: the same update is one turn.
      if (externalId && (await this.repo.hasExternal(row.id, externalId))) return reply.code(200).send({ ok: true });
      const principal: Principal = { scheme: 'fleetAgent', ownerId: row.owner_id, plan: 'byte', credentialId: row.id, resourceId: row.id };
      try {
        const { result } = await turns.start(principal, row.id, { groupId: `${TELEGRAM_PREFIX}${m.chat.id}`, text: m.text.slice(0, 32_000), senderName: m.from?.first_name ?? m.from?.username, externalId }, () => {});
        result.catch((e: unknown) => this.deps.log.warn({ err: e, fleetAgent: row.id }, 'telegram turn failed'));
        return reply.code(200).send({ ok: true });
      } catch (e) {
        if (e instanceof ApiError && e.code === 'FleetFull') return reply.code(503).headers(e.headers).send(e.toBody());
        // The fleet agent just moved off a down node: Telegram sends the update again, and it is forwarded there.
        if (e instanceof ElsewhereError) return reply.code(503).send({ error: `moving to node ${e.nodeId}; retry`, code: 'Unavailable' });
        throw e;
      }
    });
  }
}
