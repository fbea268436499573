// A fleet turn cut by nube's end, the hard way (SIGKILL, as a crash) and the operator's way (SIGTERM),
// on both metadata stores (issue 28 item 4): the turn is answered once, its conversation holds the
// user's message once and the reply once, and the model is given the user's words once (a turn run
// again after a crash used to carry its own message in the transcript and then again).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { spawnAgentNube } from '../agents/helpers.js';
import { newGroup } from './helpers.js';

describe.each(DIALECTS)('fleet: a turn cut by the end of nube (%s)', (dialect) => {
  let n: Awaited<ReturnType<typeof spawnAgentNube>>;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    n = await spawnAgentNube(`fleet-kill-${dialect}`, { dialect });
    const r = await n.call('POST', '/fleet-agents', { name: 'kill', capacity: 4 });
    expect(r.status).toBe(200);
    fa = r.body;
  }, 180_000);
  afterAll(async () => {
    await n?.call('DELETE', `/fleet-agents/${fa?.id}`).catch(() => {});
    await n?.remove();
  }, 120_000);

  for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
    it(`${signal} during a conversation's first turn: answered once, the user's words sent once`, async () => {
      const g = newGroup();
      const word = `PALABRA-${signal}-${Date.now()}`;
      const before = n.stub.requests.length;
      n.stub.push({ content: 'respuesta lenta', delayMs: 4_000 });
      const sent = n.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: g, text: word }, fa.token).catch(() => null);
      for (let i = 0; i < 600 && !n.stub.requests.slice(before).some((r) => JSON.stringify(r.body).includes(word)); i++) await sleep(100);
      expect(n.stub.requests.slice(before).some((r) => JSON.stringify(r.body).includes(word))).toBe(true);
      await n.stop(signal);
      await sent;
      await n.start();
      // The conversation ends with one user message and one reply for this turn.
      let items: { role: string; text: string }[] = [];
      for (let i = 0; i < 900; i++) {
        items = (await n.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${g}&limit=50`, undefined, fa.token)).body.items ?? [];
        if (items.some((m) => m.role === 'assistant')) break;
        await sleep(100);
      }
      expect(items.filter((m) => m.role === 'user').map((m) => m.text)).toEqual([word]);
      expect(items.filter((m) => m.role === 'assistant')).toHaveLength(1);
      // Every request the model got for this conversation carried the user's words once.
      const seen = n.stub.requests.slice(before).filter((r) => JSON.stringify(r.body).includes(word));
      expect(seen.length).toBeGreaterThanOrEqual(1);
      for (const r of seen) {
        const userText = r.body.messages.filter((m) => m.role === 'user').map((m) => (typeof m.content === 'string' ? m.content : '')).join('\n');
        expect(userText.split(word).length - 1, userText).toBe(1);
      }
    }, 240_000);
  }
});
