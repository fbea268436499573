// Broadcasts (issue 34 item 4) on SQLite and PostgreSQL: one message to every conversation of a fleet
// agent, web conversations (in their transcript) and Telegram chats (sendMessage against a local server
// speaking the Bot API), at most 30 a second, a 429 waited out with its retry_after, a chat that blocked
// the bot counted as failed; GET shows the counts and broadcast.sent carries them once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, rmSync } from 'node:fs';
import { newConversation } from '../../src/areas/fleet/repo.js';
import { startLlmStub } from '../helpers/llm-stub.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { newOwnerKey } from '../helpers/server.js';
import { TEST_ROOT } from '../sandboxes/helpers.js';
import { type BotApi, startBotApi } from './bot-api.js';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

const TOKEN = '123456:AAbbCCddEEffGGhhIIjjKKllMMnn';
const CHATS = 40;

/** CHATS Telegram chats that wrote to the bot (their conversations, as the channel keeps them): tg-<from>... */
async function addChats(t: FleetNube, fleetAgentId: string, from: number): Promise<void> {
  const ownerId = (await t.call('GET', '/account')).body.id;
  for (let i = 0; i < CHATS; i++) await t.nube.services.fleet.repo.insertConversation(newConversation({ id: fleetAgentId, owner_id: ownerId }, `tg-${from + i}`));
}

describe.each(DIALECTS)('fleet: broadcasts (%s)', (dialect) => {
  let t: FleetNube;
  let bot: BotApi;
  const events: { event: string; data: Record<string, unknown> }[] = [];

  beforeAll(async () => {
    bot = await startBotApi();
    t = await startFleetNube(`broadcasts-${dialect}`, { dialect, env: { NUBE_TELEGRAM_API_URL: bot.url } });
    t.nube.deps.bus.subscribe((e) => {
      if (e.event === 'broadcast.sent') events.push(e);
    });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
    await bot?.close();
  }, 60_000);

  it('reaches every web conversation and Telegram chat, at most 30 a second, waiting out 429s', async () => {
    const fa = await t.fleetAgent({ name: 'Difusion' });
    const empty = await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'a nadie' });
    expect(empty.status).toBe(400);
    expect(empty.body.code).toBe('NoRecipients');
    const web = newGroup();
    expect(
      (await t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: web, text: 'hola' }, fa.token))
        .status,
    ).toBe(200);
    expect((await t.call('PUT', `/fleet-agents/${fa.id}/telegram`, { botToken: TOKEN })).status).toBe(200);
    await addChats(t, fa.id, 1000);
    // Chat 1005 is limited once (429, retry after 1 s); chat 1007 blocked the bot (403, for good).
    let limited = false;
    bot.refuse = (c) => {
      if (c.method !== 'sendMessage') return undefined;
      if (c.body.chat_id === '1005' && !limited) {
        limited = true;
        return { status: 429, description: 'Too Many Requests: retry after 1', retryAfter: 1 };
      }
      if (c.body.chat_id === '1007')
        return { status: 403, description: 'Forbidden: bot was blocked by the user' };
      return undefined;
    };
    const started = Date.now();
    const b = await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'Abrimos el lunes' });
    expect(b.status).toBe(200);
    expect(b.body).toMatchObject({ status: 'sending', total: CHATS + 1, sent: 0, failed: 0 });
    let got = b.body;
    for (let i = 0; i < 300 && got.status !== 'sent'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      got = (await t.call('GET', `/fleet-agents/${fa.id}/broadcasts/${b.body.id}`)).body;
    }
    expect(got).toMatchObject({
      status: 'sent',
      total: CHATS + 1,
      sent: CHATS,
      failed: 1,
      finishedAt: expect.any(String),
    });
    // Telegram got one message per chat (1005 twice: refused then sent), no faster than 30 a second.
    const sends = bot.calls.filter((c) => c.method === 'sendMessage' && c.body.text === 'Abrimos el lunes');
    expect(new Set(sends.map((c) => c.body.chat_id)).size).toBe(CHATS);
    expect(sends).toHaveLength(CHATS + 1);
    const span = sends.at(-1)!.at - sends[0]!.at;
    expect(span).toBeGreaterThanOrEqual(((CHATS - 1) * 1000) / 30 - 50);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    // The web conversation shows it on its next read.
    const read = await t.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${web}`, undefined, fa.token);
    expect(read.body.items.at(-1)).toMatchObject({
      role: 'assistant',
      text: 'Abrimos el lunes',
      turnId: null,
    });
    // One broadcast.sent, with the counts.
    await expect
      .poll(() => events.filter((e) => e.data.id === b.body.id).length, { timeout: 10_000 })
      .toBe(1);
    expect(events.find((e) => e.data.id === b.body.id)!.data).toMatchObject({
      total: CHATS + 1,
      sent: CHATS,
      failed: 1,
      status: 'sent',
    });
    expect(
      (await t.call('GET', `/fleet-agents/${fa.id}/broadcasts`)).body.items.map((x: { id: string }) => x.id),
    ).toContain(b.body.id);
  }, 120_000);

  it('goes on after a restart of nube from where it stopped: each chat gets it once', async () => {
    const dir = `${TEST_ROOT}/fleet-broadcast-restart-${dialect}-${process.pid}`;
    mkdirSync(dir, { recursive: true });
    const stub = await startLlmStub();
    const pg = dialect === 'postgres' ? await createTempDatabase('bcrestart') : undefined;
    const env = {
      NUBE_TELEGRAM_API_URL: bot.url,
      NUBE_OWNER_KEY: newOwnerKey(),
      ...(pg ? { DATABASE_URL: pg.url } : {}),
    };
    let n = await startFleetNube('broadcast-restart', { dialect, env, dataDir: dir, stub });
    try {
      const fa = await n.fleetAgent({ name: 'Reinicio' });
      expect((await n.call('PUT', `/fleet-agents/${fa.id}/telegram`, { botToken: TOKEN })).status).toBe(200);
      await addChats(n, fa.id, 5000);
      bot.refuse = undefined;
      const b = (await n.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'Tras el reinicio' }))
        .body;
      const mine = () =>
        bot.calls.filter((c) => c.method === 'sendMessage' && c.body.text === 'Tras el reinicio');
      await expect.poll(() => mine().length, { timeout: 20_000 }).toBeGreaterThanOrEqual(10);
      await n.nube.close();
      const cut = mine().length;
      expect(cut).toBeLessThan(CHATS);
      n = await startFleetNube('broadcast-restart', { dialect, env, dataDir: dir, stub });
      let got = b;
      for (let i = 0; i < 300 && got.status !== 'sent'; i++) {
        await new Promise((r) => setTimeout(r, 100));
        got = (await n.call('GET', `/fleet-agents/${fa.id}/broadcasts/${b.id}`)).body;
      }
      expect(got).toMatchObject({ status: 'sent', sent: CHATS, failed: 0 });
      const chats = mine().map((c) => c.body.chat_id);
      expect(new Set(chats).size).toBe(CHATS);
      // At most the one in flight when nube stopped went twice.
      expect(chats.length).toBeLessThanOrEqual(CHATS + 1);
    } finally {
      await n.stop();
      await stub.close();
      await pg?.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  it("refuses bad input, another owner's fleet agent and a message token", async () => {
    const fa = await t.fleetAgent({ name: 'Otra' });
    expect((await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: '' })).status).toBe(400);
    expect(
      (await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'x'.repeat(32_001) })).status,
    ).toBe(400);
    expect(
      (await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'hola', extra: 1 })).status,
    ).toBe(400);
    expect(
      (await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'hola' }, fa.token)).status,
    ).toBe(403);
    const other = await t.nube.services.account.createAccount({ name: 'otro', plan: 'tera' });
    expect(
      (await t.call('POST', `/fleet-agents/${fa.id}/broadcasts`, { text: 'hola' }, other.secret)).status,
    ).toBe(404);
    expect((await t.call('GET', `/fleet-agents/${fa.id}/broadcasts/bc_nope`)).status).toBe(404);
  });
});
