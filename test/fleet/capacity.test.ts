// Capacity on SQLite and PostgreSQL: a fleet agent capped at one box with room for one waiting turn.
// The second turn waits and is answered (no turn.failed); the third is 503 FleetFull with a retryAfter
// after which it is admitted; the stream says `capacity` (queued or not) instead of failing.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

// Turns build boxes (sandboxes) on demand: under a loaded machine a build alone can take 20 s.
vi.setConfig({ testTimeout: 120_000 });

describe.each(DIALECTS)('fleet: capacity (%s)', (dialect) => {
  let t: FleetNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    t = await startFleetNube(`capacity-${dialect}`, { dialect, env: { NUBE_FLEET_QUEUE_FACTOR: '1', NUBE_FLEET_TURNS_PER_BOX: '1' } });
    fa = await t.fleetAgent({ name: 'Uno', capacity: 1 });
    // The box exists before the race below.
    const warm = await t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId: newGroup(), text: 'calentar' }, fa.token);
    expect(warm.status).toBe(200);
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  const send = (groupId: string, text: string) => t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId, text }, fa.token);
  const turnsIn = async (status: 'queued' | 'running') =>
    (await t.nube.deps.store.db.selectFrom('fleet_turns').select('id').where('fleet_agent_id', '=', fa.id).where('status', '=', status).execute()).length;

  it('queues the second turn, refuses the third with a retryAfter that is enough, and emits no turn.failed', async () => {
    t.stub.push({ content: 'lento uno', delayMs: 1500 }, { content: 'lento dos', delayMs: 1500 });
    const a = send(newGroup(), 'a');
    await expect.poll(() => turnsIn('running'), { timeout: 10_000 }).toBe(1);
    const b = send(newGroup(), 'b');
    await expect.poll(() => turnsIn('queued'), { timeout: 10_000 }).toBe(1);
    const gc = newGroup();
    const c = await send(gc, 'c');
    expect(c.status).toBe(503);
    expect(c.body).toMatchObject({ code: 'FleetFull', retryAfter: expect.any(Number) });
    expect(c.body.retryAfter).toBeGreaterThanOrEqual(1);
    expect(c.headers.get('retry-after')).toBe(String(c.body.retryAfter));
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.body.reply).toBe('lento uno');
    expect(rb.body.reply).toBe('lento dos');
    await expect.poll(() => t.events.filter((e) => e.data.turnId === rb.body.turnId).length, { timeout: 10_000 }).toBe(1);
    expect(t.events.filter((e) => e.event === 'turn.failed')).toEqual([]);
    // The two turns took about 3 s; the client told to come back after retryAfter is admitted then.
    await new Promise((r) => setTimeout(r, Math.max(0, c.body.retryAfter * 1000 - 3_000)));
    const again = await send(gc, 'c otra vez');
    expect(again.status).toBe(200);
    expect(again.body.reply).toBe('echo: c otra vez');
  });

  it('streams capacity events: queued (then the turn runs) and full (not a failure)', async () => {
    t.stub.push({ content: 'ocupa', delayMs: 1500 }, { content: 'espera', delayMs: 200 });
    const a = send(newGroup(), 'a');
    await expect.poll(() => turnsIn('running'), { timeout: 10_000 }).toBe(1);
    const queued = t.stream(fa.id, fa.token, { groupId: newGroup(), text: 'b' });
    await expect.poll(() => turnsIn('queued'), { timeout: 10_000 }).toBe(1);
    const full = await t.stream(fa.id, fa.token, { groupId: newGroup(), text: 'c' });
    expect(full.status).toBe(200);
    expect(full.events).toEqual([{ type: 'capacity', retryAfter: expect.any(Number), queued: false }]);
    const q = await queued;
    expect(q.events[0]).toMatchObject({ type: 'capacity', queued: true, retryAfter: expect.any(Number) });
    expect(q.events.at(-1)).toMatchObject({ type: 'done', value: 'espera' });
    expect((await a).status).toBe(200);
  });
});
