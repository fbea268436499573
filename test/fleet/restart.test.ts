// A restart of nube mid-turn on SQLite and PostgreSQL: the turn the first process was running (its
// client gone) runs again at the next start and ends with exactly one outcome event, turn.completed,
// with its user message once in the transcript; no turn.failed.
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import type { BusEvent } from '../../src/platform/events.js';
import { type AgentNube, startAgentNube } from '../agents/helpers.js';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { newOwnerKey } from '../helpers/server.js';
import { TEST_ROOT } from '../sandboxes/helpers.js';
import { newGroup } from './helpers.js';

describe.each(DIALECTS)('fleet: restart mid-turn (%s)', (dialect) => {
  const dataDir = `${TEST_ROOT}/fleet-restart-${dialect}-${process.pid}`;
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c().catch(() => {});
    rmSync(dataDir, { recursive: true, force: true });
  }, 60_000);

  it('runs the interrupted turn again and emits one turn.completed', async () => {
    mkdirSync(dataDir, { recursive: true });
    const pg = dialect === 'postgres' ? await createTempDatabase('fltrestart') : undefined;
    if (pg) cleanup.push(pg.drop);
    const stub: LlmStub = await startLlmStub();
    cleanup.push(() => stub.close());
    const env = { NUBE_OWNER_KEY: newOwnerKey(), NUBE_FLEET_IDLE_SECONDS: '3600', ...(pg ? { DATABASE_URL: pg.url } : {}) };
    const first: AgentNube = await startAgentNube('fleet-restart', { dataDir, env, stub });
    const fa = (await first.call('POST', '/fleet-agents', { name: 'Reinicio', capacity: 1 })).body;
    const g = newGroup();
    // The box is built first, so the interrupted turn is the slow one.
    expect((await first.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: g, text: 'antes' }, fa.token)).status).toBe(200);
    const firstEvents: BusEvent[] = [];
    first.nube.deps.bus.subscribe((e) => {
      if (e.event.startsWith('turn.')) firstEvents.push(e);
    });
    stub.push({ content: 'nunca llega', delayMs: 4_000 });
    const ac = new AbortController();
    const streaming = fetch(`${first.baseUrl}/api/v2/fleet-agents/${fa.id}/message-stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fa.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ groupId: g, text: 'durante' }),
      signal: ac.signal,
    }).catch(() => null);
    const db = first.nube.deps.store.db;
    await expect.poll(async () => (await db.selectFrom('fleet_turns').select('status').where('input', '=', 'durante').executeTakeFirst())?.status, { timeout: 10_000 }).toBe('running');
    const turnId = (await db.selectFrom('fleet_turns').select('id').where('input', '=', 'durante').executeTakeFirstOrThrow()).id;
    ac.abort();
    await streaming;
    // nube stops while the turn waits on the model.
    await first.nube.close();
    expect(firstEvents.filter((e) => e.data.turnId === turnId)).toEqual([]);

    const second = await startAgentNube('fleet-restart', { dataDir, env, stub });
    cleanup.push(() => second.stop());
    const events: BusEvent[] = [];
    second.nube.deps.bus.subscribe((e) => {
      if (e.event.startsWith('turn.')) events.push(e);
    });
    await expect
      .poll(async () => (await second.nube.deps.store.db.selectFrom('fleet_turns').select('status').where('id', '=', turnId).executeTakeFirst())?.status, { timeout: 60_000 })
      .toBe('completed');
    await expect.poll(() => events.filter((e) => e.data.turnId === turnId).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
    await new Promise((r) => setTimeout(r, 500));
    const mine = events.filter((e) => e.data.turnId === turnId);
    expect(mine.map((e) => e.event)).toEqual(['turn.completed']);
    const msgs = await second.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${g}`, undefined, fa.token);
    expect(msgs.body.items.filter((m: { text: string }) => m.text === 'durante')).toHaveLength(1);
    expect(msgs.body.items.at(-1)).toMatchObject({ role: 'assistant', turnId });
  }, 180_000);
});
