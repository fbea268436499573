// The `goose` template end to end, on SQLite and PostgreSQL (and across a restart on both sandbox drivers): AAIF's goose (the real binary, `goose acp`)
// behind nube's relay in its own sandbox, thinking through nube's LLM gateway to the LLM stub. Skipped,
// saying why, when goose is not provisioned on this host (scripts/install-goose.sh); under CI=true
// that is a failure instead, since CI runs scripts/setup.sh.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GOOSE } from '../../src/areas/sandboxes/runtime/namespaces/host-tools.js';
import { mkdirSync, rmSync } from 'node:fs';
import { type ChatRequest, defaultReply, type StubReply, startLlmStub } from '../helpers/llm-stub.js';
import { DRIVERS, TEST_ROOT } from '../sandboxes/helpers.js';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, acpSocket, startAgentNube, textOf } from './helpers.js';

const provisioned = existsSync(GOOSE.hostPath);
const why = `goose ${GOOSE.version} is not provisioned on this host (${GOOSE.hostPath} is missing): run scripts/install-goose.sh as root`;

/** The last turn request (not a title request) whose messages carry `text`. */
const asked = (requests: { body: ChatRequest }[], text: string) =>
  requests.filter((q) => !textOfMsg(q.body.messages[0]?.content).startsWith('Generate a short title') && JSON.stringify(q.body.messages).includes(text)).at(-1);

const textOfMsg = (c: ChatRequest['messages'][number]['content']) =>
  typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => p.text ?? '').join('') : '';

/**
 * goose also asks the model for a session title, concurrently with the turn: those get a fixed answer.
 * After a tool result the stub's default answers `tool said: <result>`; else the next scripted reply.
 */
function scripted(replies: StubReply[]) {
  return (req: ChatRequest): StubReply => {
    const system = textOfMsg(req.messages[0]?.content);
    if (system.startsWith('Generate a short title')) return { content: 'Goose title' };
    if (req.messages.at(-1)?.role === 'tool') return defaultReply(req);
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
    a = await t.agent({ template: 'goose', name: 'ganso', seedFiles: [{ name: 'notas/hola.txt', contentBase64: Buffer.from('hola desde la semilla').toString('base64') }] });
  }, 300_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('creates a goose agent that becomes running in its own sandbox from the goose template', async () => {
    expect(a).toMatchObject({ status: 'running', template: 'goose', name: 'ganso' });
    const sbx = await t.call('GET', `/sandboxes/${a.sandboxId}`);
    expect(sbx.body.template).toBe('goose');
    const v = await t.call('POST', `/sandboxes/${a.sandboxId}/exec`, { command: 'goose --version' });
    expect(v.body.stdout).toContain(GOOSE.version);
    // The binary comes from the template's shared lower layer: no copy of it in nube's data directory,
    // where each sandbox's own (upper) layer lives.
    const copies = execFileSync('find', [t.dataDir, '-name', 'goose', '-size', '+1M'], { encoding: 'utf8' });
    expect(copies).toBe('');
    // (where the sandbox's own files are: its seed file is there)
    expect(execFileSync('find', [t.dataDir, '-path', '*/upper/root/workspace/notas/hola.txt'], { encoding: 'utf8' })).toContain('hola.txt');
  });

  it("gives goose the caller's MCP servers (stdio) as tools", async () => {
    const server = `
const answer = (m) => m.method === 'initialize' ? { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 't', version: '1' } }
  : m.method === 'tools/list' ? { tools: [{ name: 'shout', description: 'upper-cases text', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }] }
  : m.method === 'tools/call' ? { content: [{ type: 'text', text: String(m.params.arguments.text).toUpperCase() + ' via stdio' }] } : null;
require('readline').createInterface({ input: process.stdin }).on('line', (l) => { const m = JSON.parse(l); if (m.id === undefined) return;
  const r = answer(m); process.stdout.write(JSON.stringify(r ? { jsonrpc: '2.0', id: m.id, result: r } : { jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no' } }) + '\\n'); });
`;
    const g = await t.agent({
      template: 'goose',
      seedFiles: [{ name: 'mcp-stdio.js', contentBase64: Buffer.from(server).toString('base64') }],
      mcpServers: [{ name: 'local', command: 'node', args: ['/root/workspace/mcp-stdio.js'] }],
    });
    replies.push({ toolCalls: [{ name: 'local__shout', arguments: JSON.stringify({ text: 'hola' }) }] });
    const r = await t.message(g.id, 'grita hola');
    expect(textOf(r.events)).toContain('HOLA via stdio');
    const tools = asked(t.stub.requests, 'grita hola')!.body.tools!.map((x) => x.function.name);
    expect(tools).toEqual(expect.arrayContaining(['local__shout', 'shell']));
    await t.call('DELETE', `/agents/${g.id}`);
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
    expect(r.events.at(-1)).toEqual({ type: 'done', session: expect.stringMatching(/^ses_/) });
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
    const msgs = JSON.stringify(asked(t.stub.requests, 'dos')!.body.messages);
    expect(msgs).toContain('uno');
    expect(msgs).toContain('primera');
  });

  it("runs goose's own shell tool when the model calls it, in the workspace with the seed files", async () => {
    replies.push({ toolCalls: [{ name: 'shell', arguments: JSON.stringify({ command: 'cat notas/hola.txt' }) }] });
    const r = await t.message(a.id, 'lee la nota');
    expect(r.status).toBe(200);
    expect(textOf(r.events)).toContain('tool said:');
    expect(textOf(r.events)).toContain('hola desde la semilla');
    expect(r.events.find((e) => e.type === 'usage')).toMatchObject({ toolCalls: 1 });
  });

  it('fails a turn past the allowance with InsufficientBalance in the stream (goose told so by the gateway), never a hang', async () => {
    const mega = await t.nube.services.account.createAccount({ name: `mega-goose-${dialect}`, plan: 'mega' });
    const g = await t.agent({ template: 'goose' }, mega.secret);
    // The first completion (a tool call) spends the month; the gateway refuses goose's next one with 402.
    replies.push({ toolCalls: [{ name: 'shell', arguments: JSON.stringify({ command: 'true' }) }], usage: { prompt_tokens: 10_000_000, completion_tokens: 1 } });
    const mid = await t.message(g.id, 'gasta todo', mega.secret);
    expect(mid.status).toBe(200);
    expect(mid.events.at(-2)).toEqual({ type: 'error', code: 'InsufficientBalance', message: expect.stringContaining('used up') });
    expect(mid.events.at(-1)).toEqual({ type: 'done', session: expect.stringMatching(/^ses_/) });
    expect((await t.call('DELETE', `/agents/${g.id}`, undefined, mega.secret)).status).toBe(200);
  });

  it('speaks ACP over its wsUrl: goose itself answers, a prompt streams, session/cancel stops one', async () => {
    const { ws, inbox, request } = await acpSocket(a.wsUrl, { authorization: `Bearer ${t.ownerKey}` });
    try {
      const init = await request(1, 'initialize', { protocolVersion: 1, clientCapabilities: {} });
      expect(init.result).toMatchObject({ agentInfo: { name: 'goose', version: GOOSE.version }, agentCapabilities: { loadSession: true } });
      const sessionId = (await request(2, 'session/new', { cwd: '/root/workspace', mcpServers: [] })).result.sessionId;
      replies.push({ content: 'hola por websocket, soy el ganso' });
      const done = await request(3, 'session/prompt', { sessionId, prompt: [{ type: 'text', text: 'hola' }] });
      expect(done.result).toMatchObject({ stopReason: 'end_turn', _meta: { usage: { model: 'stub-model', toolCalls: 0 } } });
      const chunks = inbox.filter((m) => m.method === 'session/update' && m.params.update.sessionUpdate === 'agent_message_chunk' && m.params.sessionId === sessionId);
      expect(chunks.map((m) => m.params.update.content.text).join('')).toBe('hola por websocket, soy el ganso');
      replies.push({ content: 'demasiado tarde', delayMs: 5_000 });
      const slow = request(4, 'session/prompt', { sessionId, prompt: [{ type: 'text', text: 'tarda' }] });
      await new Promise((r) => setTimeout(r, 800));
      ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'session/cancel', params: { sessionId } }));
      expect((await slow).result.stopReason).toBe('cancelled');
    } finally {
      ws.close();
    }
  });
});

describe.skipIf(!provisioned).each(DRIVERS)('%s: agents: goose across a restart of nube', (driver) => {
  it('keeps running; its goose session is loaded again (session/load) with its context', async () => {
    const stub = await startLlmStub();
    const replies: StubReply[] = [];
    stub.respond = scripted(replies);
    const dir = `${TEST_ROOT}/agents-goose-restart-${driver}-${process.pid}`;
    mkdirSync(dir, { recursive: true });
    const env = { NUBE_SANDBOX_DRIVER: driver };
    let t = await startAgentNube(`goose-restart-${driver}`, { env, dataDir: dir, stub });
    try {
      await t.nube.services.sandboxes.core.runtime.ensureTemplate('goose');
      const a = await t.agent({ template: 'goose' });
      replies.push({ content: 'anotado' });
      const s = (await t.call('POST', `/agents/${a.id}/try`, { text: 'recuerda el numero 4711', reset: true })).body.session;
      await t.close(); // nube stops; the sandbox, the relay and goose's session database stay
      t = await startAgentNube(`goose-restart-${driver}`, { env: { ...env, NUBE_OWNER_KEY: t.ownerKey }, dataDir: dir, stub });
      expect((await t.call('GET', `/agents/${a.id}`)).body).toMatchObject({ status: 'running', sandboxId: a.sandboxId });
      replies.push({ content: 'era 4711' });
      const again = await t.call('POST', `/agents/${a.id}/try`, { text: 'que numero era', session: s });
      expect(again.status).toBe(200);
      expect(again.body.text).toBe('era 4711');
      // A new goose process (new connection, the gateway on a new port) had the first turn in context.
      expect(JSON.stringify(asked(stub.requests, 'que numero era')!.body.messages)).toContain('recuerda el numero 4711');
    } finally {
      await t.stop();
      await stub.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
