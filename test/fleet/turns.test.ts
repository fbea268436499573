// Fleet turns end to end on SQLite and PostgreSQL, on real boxes (agents in sandboxes) and the LLM stub:
// /message answers {reply, turnId, cursor}; the conversation store serves /messages with cursors; the
// stream carries chunk, usage and done; turn.completed carries every field of the spec's table; a
// conversation keeps its box, and moves with its transcript when its box is gone.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

// Turns build boxes (sandboxes) on demand: under a loaded machine a build alone can take 20 s.
vi.setConfig({ testTimeout: 120_000 });

describe.each(DIALECTS)('fleet: turns (%s)', (dialect) => {
  let t: FleetNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;

  beforeAll(async () => {
    t = await startFleetNube(`turns-${dialect}`, { dialect });
    fa = await t.fleetAgent({ name: 'Soporte', capacity: 2 });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  const send = (body: Record<string, unknown>, token = fa.token) => t.call('POST', `/fleet-agents/${fa.id}/message`, body, token);
  const read = (groupId: string, since?: string, limit?: number) =>
    t.call('GET', `/fleet-agents/${fa.id}/messages?groupId=${groupId}${since ? `&since=${encodeURIComponent(since)}` : ''}${limit ? `&limit=${limit}` : ''}`, undefined, fa.token);

  it('answers a message with reply, turnId and cursor; the conversation reads back with cursors', async () => {
    const g = newGroup();
    const r = await send({ groupId: g, text: 'hola flota' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ reply: 'echo: hola flota', turnId: expect.stringMatching(/^turn_/), cursor: expect.any(String), memoryReset: false });
    expect(r.body.warning).toMatch(/no connectors/);
    const all = await read(g);
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({ hasMore: false, gap: false, cursor: r.body.cursor });
    expect(all.body.items.map((m: { role: string; text: string }) => [m.role, m.text])).toEqual([
      ['user', 'hola flota'],
      ['assistant', 'echo: hola flota'],
    ]);
    expect(all.body.items[1]).toMatchObject({ turnId: r.body.turnId, cursor: r.body.cursor });
    // Since the turn's cursor: nothing new, no gap; since the first item: the reply only.
    expect((await read(g, r.body.cursor)).body).toMatchObject({ items: [], gap: false, cursor: r.body.cursor, hasMore: false });
    const after = await read(g, all.body.items[0].cursor);
    expect(after.body.items.map((m: { text: string }) => m.text)).toEqual(['echo: hola flota']);
    // Limits page the conversation.
    const page = await read(g, undefined, 1);
    expect(page.body).toMatchObject({ hasMore: true, cursor: all.body.items[0].cursor });
  });

  it('emits turn.completed with every field of the spec table, once', async () => {
    const g = newGroup();
    const r = await send({ groupId: g, text: 'evento por favor' });
    await expect.poll(() => t.turnEvents(r.body.turnId).length, { timeout: 10_000 }).toBe(1);
    const e = t.turnEvents(r.body.turnId)[0]!;
    expect(e.event).toBe('turn.completed');
    expect(e.data).toEqual({
      turnId: r.body.turnId,
      fleetAgentId: fa.id,
      agentName: 'Soporte',
      groupId: g,
      sessionUuid: expect.stringMatching(/^[0-9a-f-]{36}$/),
      title: 'Soporte',
      summary: 'echo: evento por favor',
      replyLength: 'echo: evento por favor'.length,
      cursor: r.body.cursor,
      memoryReset: false,
      startedAt: expect.any(String),
      finishedAt: expect.any(String),
      durationMs: expect.any(Number),
      usage: { model: 'stub-model', inputTokens: expect.any(Number), outputTokens: 4, toolCalls: 0 },
    });
    expect(Date.parse(e.data.finishedAt as string) - Date.parse(e.data.startedAt as string)).toBe(e.data.durationMs);
  });

  it('keeps a conversation on its box: the second turn continues the same model session', async () => {
    const g = newGroup();
    await send({ groupId: g, text: 'primero' });
    const n = t.stub.requests.length;
    const r = await send({ groupId: g, text: 'segundo' });
    expect(r.body.reply).toBe('echo: segundo');
    const req = t.stub.requests.slice(n).at(-1)!.body;
    const texts = req.messages.map((m) => (typeof m.content === 'string' ? m.content : ''));
    expect(texts).toEqual(expect.arrayContaining(['primero', 'echo: primero', 'segundo']));
    const boxes = await t.nube.deps.store.db.selectFrom('fleet_boxes').selectAll().where('fleet_agent_id', '=', fa.id).execute();
    expect(boxes.length).toBeGreaterThanOrEqual(1);
    expect(boxes.length).toBeLessThanOrEqual(2);
  });

  it('streams chunk, usage and done (done.value is the reply) with the token', async () => {
    const g = newGroup();
    const r = await t.stream(fa.id, fa.token, { groupId: g, text: 'una respuesta en trozos varios' });
    expect(r.status).toBe(200);
    const types = r.events.map((e) => e.type);
    expect(types.filter((x) => x === 'chunk').length).toBeGreaterThan(1);
    expect(types).toContain('usage');
    const done = r.events.at(-1);
    expect(done).toMatchObject({ type: 'done', value: 'echo: una respuesta en trozos varios', turnId: expect.any(String), cursor: expect.any(String) });
    expect(t.stub.requests.length).toBeGreaterThan(0);
  });

  it('streams tool events when the model calls a tool', async () => {
    const g = newGroup();
    const r = await t.stream(fa.id, fa.token, { groupId: g, text: 'call shell {"command":"echo hola-tool"}' });
    const tools = r.events.filter((e) => e.type === 'tool');
    expect(tools.length).toBeGreaterThan(0);
    expect(tools.at(-1)).toMatchObject({ status: 'completed' });
    expect(r.events.at(-1).value).toContain('hola-tool');
  });

  it('runs a configuration group: its prompt and the instructions open the conversation; no warning', async () => {
    const cg = await t.call('POST', '/fleet-config-groups', { name: 'tienda', prompt: 'Vendes zapatos.' });
    const other = await t.fleetAgent({ name: 'Ventas', instructions: 'Responde en español.', configGroupIds: [cg.body.id] });
    const g = newGroup();
    const n = t.stub.requests.length;
    const r = await t.call('POST', `/fleet-agents/${other.id}/message`, { groupId: g, text: 'hola', configGroupId: cg.body.id }, other.token);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.warning).toBeUndefined();
    const first = t.stub.requests.slice(n)[0]!.body.messages.find((m) => m.role === 'user')!;
    expect(first.content).toContain('Responde en español.');
    expect(first.content).toContain('Vendes zapatos.');
    // A group this fleet agent does not list is refused.
    const foreign = await t.call('POST', '/fleet-config-groups', { name: 'otra' });
    const bad = await t.call('POST', `/fleet-agents/${other.id}/message`, { groupId: g, text: 'x', configGroupId: foreign.body.id }, other.token);
    expect(bad.status).toBe(400);
  });

  it('moves a conversation whose box is gone to a new box with its transcript (no memory reset)', async () => {
    const g = newGroup();
    await send({ groupId: g, text: 'me llamo Ana' });
    const conv = await t.nube.deps.store.db.selectFrom('fleet_conversations').selectAll().where('group_id', '=', g).executeTakeFirstOrThrow();
    const box = await t.nube.deps.store.db.selectFrom('fleet_boxes').selectAll().where('id', '=', conv.box_id!).executeTakeFirstOrThrow();
    const agent = await t.call('GET', `/agents/${box.agent_id}`);
    expect((await t.call('DELETE', `/sandboxes/${agent.body.sandboxId}`)).status).toBe(200);
    const n = t.stub.requests.length;
    const r = await send({ groupId: g, text: 'cómo me llamo' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.memoryReset).toBe(false);
    const first = t.stub.requests.slice(n)[0]!.body.messages.find((m) => m.role === 'user')!;
    expect(first.content).toContain('Earlier in this conversation');
    expect(first.content).toContain('me llamo Ana');
    const moved = await t.nube.deps.store.db.selectFrom('fleet_conversations').selectAll().where('group_id', '=', g).executeTakeFirstOrThrow();
    expect(moved.box_id).not.toBe(conv.box_id);
  });

  it('a turn with no reply ends as 502 and turn.failed with error {code, message}', async () => {
    const g = newGroup();
    t.stub.push({ status: 500, content: 'upstream broke' });
    const r = await send({ groupId: g, text: 'falla' });
    expect(r.status, JSON.stringify(r.body)).toBe(502);
    expect(r.body.turnId).toMatch(/^turn_/);
    await expect.poll(() => t.turnEvents(r.body.turnId).length, { timeout: 10_000 }).toBe(1);
    const e = t.turnEvents(r.body.turnId)[0]!;
    expect(e.event).toBe('turn.failed');
    expect(e.data).toMatchObject({ turnId: r.body.turnId, groupId: g, replyLength: 0, error: { code: expect.any(String), message: expect.any(String) } });
    // The user's message stays in the transcript.
    expect((await read(g)).body.items.map((m: { role: string }) => m.role)).toEqual(['user']);
  });
});
