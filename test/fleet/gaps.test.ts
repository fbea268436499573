// Gaps on SQLite and PostgreSQL: a conversation trimmed by length answers cursor_too_old to a cursor
// whose next messages are gone; a conversation whose model started blank (its box was lost and no
// transcript is carried: NUBE_FLEET_CARRY_MESSAGES=0) answers context_reset with resetAt to older cursors.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

// Turns build boxes (sandboxes) on demand: under a loaded machine a build alone can take 20 s.
vi.setConfig({ testTimeout: 120_000 });

describe.each(DIALECTS)('fleet: gaps (%s)', (dialect) => {
  let t: FleetNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    t = await startFleetNube(`gaps-${dialect}`, { dialect, env: { NUBE_FLEET_CARRY_MESSAGES: '0', NUBE_FLEET_TRANSCRIPT_MAX_MESSAGES: '4' } });
    fa = await t.fleetAgent({ name: 'Gaps', capacity: 2 });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  const send = (groupId: string, text: string) => t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId, text }, fa.token);
  const read = (groupId: string, since?: string) =>
    t.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${groupId}${since ? `&since=${encodeURIComponent(since)}` : ''}`, undefined, fa.token);

  it('context_reset after the box was lost without a transcript carried; cursor_too_old once trimmed', async () => {
    const g = newGroup();
    const first = await send(g, 'uno');
    const seen = await read(g);
    const oldest = seen.body.items[0].cursor;
    const conv = await t.nube.deps.store.db.selectFrom('fleet_conversations').selectAll().where('group_id', '=', g).executeTakeFirstOrThrow();
    const box = await t.nube.deps.store.db.selectFrom('fleet_boxes').selectAll().where('id', '=', conv.box_id!).executeTakeFirstOrThrow();
    const agent = await t.call('GET', `/agents/${box.agent_id}`);
    expect((await t.call('DELETE', `/sandboxes/${agent.body.sandboxId}`)).status).toBe(200);

    const second = await send(g, 'dos');
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    expect(second.body.memoryReset).toBe(true);
    await expect.poll(() => t.events.filter((e) => e.data.turnId === second.body.turnId).length, { timeout: 10_000 }).toBe(1);
    expect(t.events.find((e) => e.data.turnId === second.body.turnId)!.data.memoryReset).toBe(true);

    const reset = await read(g, first.body.cursor);
    expect(reset.body).toMatchObject({ gap: true, gapReason: 'context_reset', resetAt: expect.any(String) });
    expect(reset.body.items.map((m: { text: string }) => m.text)).toEqual(['uno', 'echo: uno', 'dos', 'echo: dos']);
    // A cursor from after the reset reads on without a gap.
    expect((await read(g, second.body.cursor)).body).toMatchObject({ gap: false, items: [] });

    // Six messages on a conversation that keeps four: the oldest cursor no longer resolves.
    const third = await send(g, 'tres');
    expect(third.status).toBe(200);
    const tooOld = await read(g, oldest);
    expect(tooOld.body).toMatchObject({ gap: true, gapReason: 'cursor_too_old' });
    expect(tooOld.body.resetAt).toBeUndefined();
    expect(tooOld.body.items.map((m: { text: string }) => m.text)).toEqual(['dos', 'echo: dos', 'tres', 'echo: tres']);
    expect(tooOld.body.cursor).toBe(third.body.cursor);
  });
});
