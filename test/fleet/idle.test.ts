// Elasticity on SQLite and PostgreSQL: a box idle longer than NUBE_FLEET_IDLE_SECONDS is removed (its
// agent and sandbox deleted), and the conversation it served moves to a new box with its transcript.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

describe.each(DIALECTS)('fleet: idle boxes (%s)', (dialect) => {
  let t: FleetNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    t = await startFleetNube(`idle-${dialect}`, { dialect, env: { NUBE_FLEET_IDLE_SECONDS: '2' } });
    fa = await t.fleetAgent({ name: 'Idle' });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('removes an idle box and moves its conversation with the transcript', async () => {
    const g = newGroup();
    const first = await t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: g, text: 'recuerda el 7' }, fa.token);
    expect(first.status).toBe(200);
    const db = t.nube.deps.store.db;
    const [box] = await db.selectFrom('fleet_boxes').selectAll().where('fleet_agent_id', '=', fa.id).execute();
    expect(box).toBeDefined();
    await expect.poll(async () => (await db.selectFrom('fleet_boxes').select('id').where('fleet_agent_id', '=', fa.id).execute()).length, { timeout: 20_000 }).toBe(0);
    await expect.poll(async () => (await t.call('GET', `/agents/${box!.agent_id}`)).status, { timeout: 20_000 }).toBe(404);
    const conv = await db.selectFrom('fleet_conversations').selectAll().where('group_id', '=', g).executeTakeFirstOrThrow();
    expect(conv.box_id).toBeNull();
    const n = t.stub.requests.length;
    const second = await t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: g, text: 'qué número' }, fa.token);
    expect(second.status).toBe(200);
    expect(second.body.memoryReset).toBe(false);
    const opening = t.stub.requests.slice(n)[0]!.body.messages.find((m) => m.role === 'user')!;
    expect(opening.content).toContain('recuerda el 7');
  }, 120_000);
});
