// The Telegram channel on SQLite and PostgreSQL against a local server speaking the Bot API: connecting
// registers nube's webhook with a secret; a text update runs a turn in `tg-<chat id>` and the reply goes
// back with sendMessage; a wrong secret is 401; disconnecting deletes the webhook.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { startBotApi } from './bot-api.js';
import { type FleetNube, startFleetNube } from './helpers.js';

const TOKEN = '123456:AAbbCCddEEffGGhhIIjjKKllMMnn';

describe.each(DIALECTS)('fleet: telegram channel (%s)', (dialect) => {
  let t: FleetNube;
  let bot: Awaited<ReturnType<typeof startBotApi>>;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    bot = await startBotApi();
    t = await startFleetNube(`telegram-${dialect}`, { dialect, env: { NUBE_TELEGRAM_API_URL: bot.url } });
    fa = await t.fleetAgent({ name: 'Bot' });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
    await bot?.close();
  }, 60_000);

  const update = (secret: string, body: unknown) =>
    fetch(`${t.baseUrl}/api/v2/fleet-channels/telegram/${fa.id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': secret },
      body: JSON.stringify(body),
    });

  it('connects a bot, answers a chat message with sendMessage, and keeps the conversation', async () => {
    const bad = await t.call('PUT', `/fleet-agents/${fa.id}/telegram`, { botToken: '111:bad-token-bad-token-bad-token' });
    expect(bad.status).toBe(502);
    expect((await t.call('PUT', `/fleet-agents/${fa.id}/telegram`, { botToken: 'nope' })).status).toBe(400);
    const c = await t.call('PUT', `/fleet-agents/${fa.id}/telegram`, { botToken: TOKEN });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.channels).toEqual(['web', 'telegram']);
    const hook = bot.calls.find((x) => x.method === 'setWebhook' && x.token === TOKEN)!;
    expect(hook.body.url).toBe(`${t.baseUrl}/api/v2/fleet-channels/telegram/${fa.id}`);
    const secret = hook.body.secret_token as string;
    expect(secret.length).toBeGreaterThanOrEqual(32);
    // The bot token is sealed at rest.
    const row = await t.nube.deps.store.db.selectFrom('fleet_agents').selectAll().where('id', '=', fa.id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(TOKEN);

    expect((await update('wrong', { update_id: 1, message: { chat: { id: 42 }, text: 'hola' } })).status).toBe(401);
    const r = await update(secret, { update_id: 2, message: { chat: { id: 42 }, text: 'hola bot', from: { first_name: 'Ana' } } });
    expect(r.status).toBe(200);
    await expect.poll(() => bot.calls.filter((x) => x.method === 'sendMessage').length, { timeout: 60_000 }).toBe(1);
    // The same update delivered again is acknowledged, not a second turn.
    expect((await update(secret, { update_id: 2, message: { chat: { id: 42 }, text: 'hola bot', from: { first_name: 'Ana' } } })).status).toBe(200);
    expect(bot.calls.find((x) => x.method === 'sendMessage')!.body).toEqual({ chat_id: '42', text: 'echo: hola bot' });
    // Not a text message: acknowledged, no turn.
    expect((await update(secret, { update_id: 3, edited_message: { chat: { id: 42 }, text: 'x' } })).status).toBe(200);
    // The owner reads the chat; the MESSAGE token (a public page's) never does: a private chat's id is its
    // Telegram user's id, no secret.
    const msgs = await t.call('GET', `/fleet-agents/${fa.id}/conversations/tg-42/messages`);
    expect(msgs.body.items.map((m: { text: string }) => m.text)).toEqual(['hola bot', 'echo: hola bot']);
    const stolen = await t.call('GET', `/fleet-agents/${fa.id}/messages?groupId=tg-42`, undefined, fa.token);
    expect(stolen.status).toBe(403);
    expect(stolen.body).toMatchObject({ code: 'CredentialNotAllowed' });
    const key = await t.call('POST', `/fleet-agents/${fa.id}/public-keys`, { groupId: 'tg-42' }, fa.token);
    expect(key.status).toBe(400);
    const ev = t.events.find((e) => e.data.groupId === 'tg-42');
    expect(ev).toMatchObject({ event: 'turn.completed', data: { fleetAgentId: fa.id, replyLength: 'echo: hola bot'.length } });

    expect((await t.call('DELETE', `/fleet-agents/${fa.id}/telegram`)).status).toBe(200);
    expect(bot.calls.at(-1)).toMatchObject({ method: 'deleteWebhook', token: TOKEN });
    expect((await update(secret, { update_id: 4, message: { chat: { id: 42 }, text: 'x' } })).status).toBe(401);
    expect((await t.call('GET', `/fleet-agents/${fa.id}`)).body.channels).toEqual(['web']);
  }, 120_000);
});
