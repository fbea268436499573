// Agents end to end on the default driver, on SQLite and PostgreSQL: create -> building -> running, a streamed message through
// the LLM gateway to the stub, a turn where the model calls a tool and answers with its result, try,
// sessions, the transcript, and usage counted into the account's LLM tokens.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, startAgentNube, textOf } from './helpers.js';

describe.each(DIALECTS)('agents: basics (%s)', (dialect) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;

  beforeAll(async () => {
    t = await startAgentNube(`basics-${dialect}`, { dialect });
    a = await t.agent({ name: 'helper', seedFiles: [{ name: 'notes/hello.txt', contentBase64: Buffer.from('hola desde semilla').toString('base64') }] });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('creates an agent that becomes running in its own sandbox', async () => {
    expect(a).toMatchObject({ status: 'running', template: 'acp', name: 'helper', agentId: a.id });
    expect(a.id).toMatch(/^agt_/);
    expect(a.embedToken).toMatch(/^agt_[A-Za-z0-9]{40}$/);
    expect(a.wsUrl).toBe(`${t.baseUrl.replace('http', 'ws')}/api/v2/agents/${a.id}/acp`);
    const got = await t.call('GET', `/agents/${a.id}`);
    expect(got.body.embedToken).toBeNull();
    const sbx = await t.call('GET', `/sandboxes/${a.sandboxId}`);
    expect(sbx.status).toBe(200);
    const list = await t.call('GET', '/agents');
    expect(list.body.agents.map((x: { id: string }) => x.id)).toEqual([a.id]);
  });

  it('streams a message as chunks, usage and done, and counts the tokens', async () => {
    const before = (await t.call('GET', '/account/llm-tokens')).body.used;
    const r = await t.message(a.id, 'hola agente, esta es una respuesta larga');
    expect(r.status).toBe(200);
    expect(textOf(r.events)).toBe('echo: hola agente, esta es una respuesta larga');
    expect(r.events.filter((e) => e.type === 'chunk').length).toBeGreaterThan(1);
    const usage = r.events.find((e) => e.type === 'usage');
    expect(usage).toMatchObject({ model: 'stub-model', inputTokens: expect.any(Number), outputTokens: 8, toolCalls: 0 });
    // The spec's done, naming the session the turn ran in.
    expect(r.events.at(-1)).toEqual({ type: 'done', session: expect.stringMatching(/^ses_/) });
    const after = (await t.call('GET', '/account/llm-tokens')).body.used;
    expect(after - before).toBe(usage.inputTokens + usage.outputTokens);
    // The agent called the gateway with its scoped credential, never with the operator's key.
    const seen = t.stub.requests.at(-1)!;
    expect(seen.authorization).toBe('Bearer sk-operator');
  });

  it('runs a tool the model calls and answers with its result (seed files are in the workspace)', async () => {
    const r = await t.message(a.id, 'call shell {"command":"cat notes/hello.txt"}');
    expect(textOf(r.events)).toContain('tool said: exit code 0\nhola desde semilla');
    expect(r.events.find((e) => e.type === 'usage')).toMatchObject({ toolCalls: 1 });
    const req = t.stub.requests.at(-1)!.body;
    expect(req.tools?.map((x) => x.function.name)).toEqual(expect.arrayContaining(['shell', 'read_file', 'write_file', 'edit_file']));
  });

  it('try answers the whole reply with its session; reset opens a new one; the session keeps context', async () => {
    const first = await t.call('POST', `/agents/${a.id}/try`, { text: 'uno', reset: true });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ text: 'echo: uno', error: null, session: expect.stringMatching(/^ses_/) });
    expect(first.body.ms).toEqual(expect.any(Number));
    const second = await t.call('POST', `/agents/${a.id}/try`, { text: 'dos', session: first.body.session });
    expect(second.body).toMatchObject({ text: 'echo: dos', session: first.body.session });
    // The agent sent the session's history: uno's turn was in the context of dos.
    const msgs = t.stub.requests.at(-1)!.body.messages.map((m) => m.content);
    expect(msgs).toContain('uno');
    const unknown = await t.call('POST', `/agents/${a.id}/try`, { text: 'x', session: 'ses_nope' });
    expect(unknown.status).toBe(404);
  });

  it('one turn at a time per session: a second try gets 409 turno_en_curso, a second message waits its turn', async () => {
    const s = (await t.call('POST', `/agents/${a.id}/try`, { text: 'abre', reset: true })).body.session;
    t.stub.push({ content: 'lento', delayMs: 1500 });
    const slow = t.call('POST', `/agents/${a.id}/try`, { text: 'primero', session: s });
    await new Promise((r) => setTimeout(r, 300));
    const busy = await t.call('POST', `/agents/${a.id}/try`, { text: 'segundo', session: s });
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ error: 'turno_en_curso', session: s });
    expect((await slow).body.text).toBe('lento');

    // Messages go to the default session: two at once run one after the other, in order.
    t.stub.push({ content: 'A', delayMs: 800 });
    const m1 = t.message(a.id, 'm1');
    await new Promise((r) => setTimeout(r, 100));
    const m2 = t.message(a.id, 'm2');
    const [r1, r2] = await Promise.all([m1, m2]);
    expect(textOf(r1.events)).toBe('A');
    expect(textOf(r2.events)).toBe('echo: m2');
  });

  it('keeps a turn whose client disconnected in the transcript (not cancelled)', async () => {
    t.stub.push({ content: 'respuesta completa tras desconexion', delayMs: 800 });
    const ac = new AbortController();
    const pending = fetch(`${t.baseUrl}/api/v2/agents/${a.id}/message`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ content: 'me voy' }),
      signal: ac.signal,
    }).catch(() => null);
    await new Promise((r) => setTimeout(r, 300));
    ac.abort();
    await pending;
    for (let i = 0; i < 100; i++) {
      const tr = await t.call('GET', `/agents/${a.id}/turns`);
      const turn = tr.body.turns.find((x: { input: string }) => x.input === 'me voy');
      if (turn?.status === 'done') {
        expect(turn.output).toBe('respuesta completa tras desconexion');
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the turn did not finish in the transcript');
  });

  it('502 from try when the agent ends without text', async () => {
    t.stub.push({ content: '' });
    const r = await t.call('POST', `/agents/${a.id}/try`, { text: 'nada' });
    expect(r.status).toBe(502);
    expect(r.body.session).toMatch(/^ses_/);
  });

  it('waits for a gateway unreachable for a moment instead of failing the turn (issue 28 item 4)', async () => {
    const gw = new URL(await t.nube.services.llm.gatewayUrl());
    const host = t.nube.services.sandboxes.hostNetwork;
    await host.closeHostPort(Number(gw.port));
    const turn = t.message(a.id, 'despues del corte');
    await new Promise((r) => setTimeout(r, 2_000));
    await host.openHostPort(Number(gw.port));
    const r = await turn;
    expect(r.events.find((e) => e.type === 'error')).toBeUndefined();
    expect(textOf(r.events)).toBe('echo: despues del corte');
  });
});
