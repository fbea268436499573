// The `goose` template end to end, on SQLite and PostgreSQL: AAIF's goose (the real binary, `goose acp`)
// behind nube's relay in its own sandbox, thinking through nube's LLM gateway to the LLM stub. Skipped,
// saying why, when goose is not provisioned on this host (scripts/install-goose.sh); under CI=true
// that is a failure instead, since CI runs scripts/setup.sh.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GOOSE } from '../../src/areas/sandboxes/runtime/namespaces/host-tools.js';
import type { ChatRequest, StubReply } from '../helpers/llm-stub.js';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, startAgentNube, textOf } from './helpers.js';

const provisioned = existsSync(GOOSE.hostPath);
const why = `goose ${GOOSE.version} is not provisioned on this host (${GOOSE.hostPath} is missing): run scripts/install-goose.sh as root`;

const textOfMsg = (c: ChatRequest['messages'][number]['content']) =>
  typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => p.text ?? '').join('') : '';

/** goose also asks the model for a session title, concurrently with the turn: those get a fixed answer. */
function scripted(replies: StubReply[]) {
  return (req: ChatRequest): StubReply => {
    const system = textOfMsg(req.messages[0]?.content);
    if (system.startsWith('Generate a short title')) return { content: 'Goose title' };
    return replies.shift() ?? { content: 'sin guion' };
  };
}

describe('agents: goose provisioning', () => {
  it.runIf(!provisioned && process.env.CI === 'true')('goose is provisioned under CI', () => {
    expect.fail(why);
  });
  it.skipIf(provisioned)(`skipped: ${why}`, () => {});
});

describe.skipIf(!provisioned).each(DIALECTS)('agents: goose (%s)', (dialect) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;
  const replies: StubReply[] = [];

  beforeAll(async () => {
    t = await startAgentNube(`goose-${dialect}`, { dialect });
    t.stub.respond = scripted(replies);
    // The goose sandbox template (base plus the binary, seconds once base is there) ahead of the agent.
    await t.nube.services.sandboxes.core.runtime.ensureTemplate('goose');
    a = await t.agent({ template: 'goose', name: 'ganso' });
  }, 300_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('creates a goose agent that becomes running in its own sandbox from the goose template', async () => {
    expect(a).toMatchObject({ status: 'running', template: 'goose', name: 'ganso' });
    const sbx = await t.call('GET', `/sandboxes/${a.sandboxId}`);
    expect(sbx.body.template).toBe('goose');
  });

  it('streams a message as chunks of the scripted reply, usage and done, and meters the tokens', async () => {
    const before = (await t.call('GET', '/account/llm-tokens')).body.used;
    replies.push({ content: 'el ganso responde en varios trozos de texto', chunkSize: 6 });
    const r = await t.message(a.id, 'hola ganso');
    expect(r.status).toBe(200);
    expect(textOf(r.events)).toBe('el ganso responde en varios trozos de texto');
    expect(r.events.filter((e) => e.type === 'chunk').length).toBeGreaterThan(1);
    const usage = r.events.find((e) => e.type === 'usage');
    expect(usage).toMatchObject({ model: 'stub-model', toolCalls: 0, outputTokens: expect.any(Number) });
    expect(usage.inputTokens).toBeGreaterThan(0);
    expect(r.events.at(-1)).toEqual({ type: 'done' });
    // Every completion goose asked for went through the gateway and was counted (its title too).
    const after = (await t.call('GET', '/account/llm-tokens')).body.used;
    expect(after - before).toBeGreaterThanOrEqual(usage.inputTokens + usage.outputTokens);
    // It was goose that asked, through the gateway with the operator's upstream key, never with its own.
    const turn = t.stub.requests.filter((q) => textOfMsg(q.body.messages[0]?.content).includes('goose')).at(-1)!;
    expect(turn.authorization).toBe('Bearer sk-operator');
    expect(JSON.stringify(turn.body.messages)).toContain('hola ganso');
  });

  it('try answers the whole reply; the session keeps its context', async () => {
    replies.push({ content: 'primera' });
    const first = await t.call('POST', `/agents/${a.id}/try`, { text: 'uno', reset: true });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ text: 'primera', error: null, session: expect.stringMatching(/^ses_/) });
    replies.push({ content: 'segunda' });
    const second = await t.call('POST', `/agents/${a.id}/try`, { text: 'dos', session: first.body.session });
    expect(second.body).toMatchObject({ text: 'segunda', session: first.body.session });
    const msgs = JSON.stringify(t.stub.requests.at(-1)!.body.messages);
    expect(msgs).toContain('uno');
    expect(msgs).toContain('primera');
  });
});
