// The LLM gateway end to end: a scoped credential calls the gateway listener on the sandbox bridge's
// host address, which relays to a local OpenAI-protocol server (streaming and not, tool calls), meters
// the tokens into the account's llmTokens, refuses past the plan's allowance and after revocation.
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { SANDBOX_ENV, TEST_ROOT } from '../sandboxes/helpers.js';

/** Reads an SSE body into its `data:` payloads. */
async function sse(r: Response): Promise<string[]> {
  const text = await r.text();
  return text
    .split('\n\n')
    .map((e) => e.trim())
    .filter((e) => e.startsWith('data:'))
    .map((e) => e.slice(5).trim());
}

describe.each(DIALECTS)('LLM gateway (%s)', (dialect) => {
  let stub: LlmStub;
  let t: TestNube;
  let url: string;
  let cred: string;
  let owner: string;
  const dir = `${TEST_ROOT}/llm-gw-${dialect}-${process.pid}`;

  const chat = (body: unknown, key = cred) =>
    fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    stub = await startLlmStub();
    mkdirSync(dir, { recursive: true });
    t = await startNube({
      dialect,
      dataDir: dir,
      env: { ...SANDBOX_ENV, NUBE_LLM_BASE_URL: stub.url, NUBE_LLM_API_KEY: 'sk-operator', NUBE_LLM_MODEL: 'op-model', NUBE_LLM_GATEWAY_PORT: '0' },
    });
    owner = (await json(await caller(t)('GET', '/account'))).id;
    cred = await t.nube.services.llm.issueCredential(owner, 'test:one', null);
    url = await t.nube.services.llm.gatewayUrl();
  });
  afterAll(async () => {
    await t?.close();
    await stub?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('listens on the bridge host address and serves only the OpenAI routes', async () => {
    expect(url).toMatch(/^http:\/\/10\.78\.0\.1:\d+\/v1$/);
    const models = await json(await fetch(`${url}/models`, { headers: { authorization: `Bearer ${cred}` } }));
    expect(models.data[0].id).toBe('op-model');
    const api = await fetch(url.replace(/\/v1$/, '/api/v2/account'), { headers: { authorization: `Bearer ${t.ownerKey}` } });
    expect(api.status).toBe(404);
    expect((await chat({ messages: [] }, t.ownerKey)).status).toBe(401);
    expect((await chat({ messages: [] }, 'nube_llm_nothing')).status).toBe(401);
    expect((await chat({ nope: 1 })).status).toBe(400);
  });

  it('relays a non-streaming completion with the operator key and model, and counts its tokens', async () => {
    const before = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    const r = await chat({ model: 'whatever', messages: [{ role: 'user', content: 'hola mundo' }] });
    expect(r.status).toBe(200);
    const body = await json(r);
    expect(body.choices[0].message.content).toBe('echo: hola mundo');
    const seen = stub.requests.at(-1)!;
    expect(seen.authorization).toBe('Bearer sk-operator');
    expect(seen.body.model).toBe('op-model');
    const after = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    expect(after - before).toBe(body.usage.total_tokens);
    const usage = await json(await caller(t)('GET', '/account/usage'));
    expect(usage.llmTokens.used).toBe(after);
  });

  it('relays a streamed tool call in fragments, asks the upstream for usage and counts it', async () => {
    const before = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    const r = await chat({
      stream: true,
      messages: [{ role: 'user', content: 'call shell {"command":"ls -la /root"}' }],
      tools: [{ type: 'function', function: { name: 'shell', parameters: { type: 'object' } } }],
    });
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    const events = await sse(r);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    // The client did not ask for usage: the usage chunk the gateway asked for is not passed on.
    expect(chunks.every((c) => c.choices.length > 0)).toBe(true);
    const calls = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    expect(calls[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'shell' } });
    expect(calls.map((c) => c.function.arguments ?? '').join('')).toBe('{"command":"ls -la /root"}');
    expect(calls.length).toBeGreaterThan(2);
    expect(stub.requests.at(-1)!.body.stream_options).toEqual({ include_usage: true });
    const after = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    expect(after).toBeGreaterThan(before);
  });

  it('passes the usage chunk on when asked, and estimates when the upstream sends none', async () => {
    let r = await chat({ stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'uno dos tres' }] });
    let chunks = (await sse(r)).slice(0, -1).map((e) => JSON.parse(e));
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe('echo: uno dos tres');
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: 4 });

    const before = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    stub.push({ content: 'x'.repeat(400), usage: false });
    r = await chat({ stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'long' }] });
    chunks = (await sse(r)).slice(0, -1).map((e) => JSON.parse(e));
    const u = chunks.at(-1).usage;
    expect(u).toMatchObject({ completion_tokens: 100, estimated: true });
    const after = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
    expect(after - before).toBe(u.total_tokens);
  });

  it('sends [DONE] only once the tokens are counted (a client may go on at [DONE], before the end)', async () => {
    // A slow counter makes the order visible: without the hold-back, [DONE] would come 300 ms before it.
    // biome-ignore lint/suspicious/noExplicitAny: reaching the service's usage store to slow it down
    const usage = (t.nube.services.llm as any).d.usage as { add: (...a: unknown[]) => Promise<void> };
    const add = usage.add.bind(usage);
    usage.add = async (...a: unknown[]) => {
      await new Promise((r) => setTimeout(r, 300));
      await add(...a);
    };
    try {
      const before = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
      const r = await chat({ stream: true, messages: [{ role: 'user', content: 'hasta el final' }] });
      const reader = r.body!.getReader();
      let text = '';
      while (!text.includes('data: [DONE]')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      expect(text).toContain('data: [DONE]');
      const after = (await json(await caller(t)('GET', '/account/llm-tokens'))).used;
      expect(after).toBeGreaterThan(before);
      await reader.cancel();
    } finally {
      usage.add = add;
    }
  });

  it('maps upstream failures: 429 passes, 500 becomes 502', async () => {
    stub.push({ status: 429, content: 'slow down' });
    let r = await chat({ messages: [{ role: 'user', content: 'x' }] });
    expect(r.status).toBe(429);
    stub.push({ status: 500 });
    r = await chat({ messages: [{ role: 'user', content: 'x' }] });
    expect(r.status).toBe(502);
    expect((await json(r)).error.code).toBe('UpstreamError');
  });

  it('refuses with 402 InsufficientBalance past the allowance (Byte has none) and before calling upstream', async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' });
    const c = await t.nube.services.llm.issueCredential(byte.account.id, 'test:byte', null);
    const n = stub.requests.length;
    const r = await chat({ messages: [{ role: 'user', content: 'x' }] }, c);
    expect(r.status).toBe(402);
    expect((await json(r)).error.code).toBe('InsufficientBalance');
    expect(stub.requests.length).toBe(n);

    const mega = await t.nube.services.account.createAccount({ name: 'mega', plan: 'mega' });
    await t.nube.deps.usage.add(mega.account.id, 'llmTokens', 10_000_000);
    const c2 = await t.nube.services.llm.issueCredential(mega.account.id, 'test:mega', null);
    expect((await chat({ messages: [{ role: 'user', content: 'x' }] }, c2)).status).toBe(402);
  });

  it('refuses a revoked credential', async () => {
    const c = await t.nube.services.llm.issueCredential(owner, 'test:revoked', null);
    expect((await chat({ messages: [{ role: 'user', content: 'x' }] }, c)).status).toBe(200);
    await t.nube.services.llm.revokeCredential('test:revoked');
    expect((await chat({ messages: [{ role: 'user', content: 'x' }] }, c)).status).toBe(401);
  });

  it("uses the account's own AI key when set, through the outbound guard", async () => {
    // The stub is on loopback: the guard refuses it unless the operator allowed it; this nube did not.
    const put = await caller(t)('PUT', '/account/ai-key', { baseUrl: stub.url, apiKey: 'sk-own', model: 'own-model' });
    expect(put.status).toBe(400);
  });
});

describe('LLM gateway: account key and no upstream', () => {
  it("relays with the account's key and model when it has one, and answers 503 LlmNotConfigured with none", async () => {
    const stub = await startLlmStub();
    const dir = `${TEST_ROOT}/llm-gw-own-${process.pid}`;
    mkdirSync(dir, { recursive: true });
    const t = await startNube({ dataDir: dir, env: { ...SANDBOX_ENV, NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_LLM_GATEWAY_PORT: '0' } });
    try {
      const owner = (await json(await caller(t)('GET', '/account'))).id;
      const cred = await t.nube.services.llm.issueCredential(owner, 'test:own', null);
      const url = await t.nube.services.llm.gatewayUrl();
      const chat = () =>
        fetch(`${url}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${cred}`, 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
        });
      let r = await chat();
      expect(r.status).toBe(503);
      expect((await json(r)).error.message).toContain('NUBE_LLM_BASE_URL');
      expect((await caller(t)('PUT', '/account/ai-key', { baseUrl: stub.url, apiKey: 'sk-own', model: 'own-model' })).status).toBe(200);
      r = await chat();
      expect(r.status).toBe(200);
      expect(stub.requests.at(-1)).toMatchObject({ authorization: 'Bearer sk-own', body: { model: 'own-model' } });
    } finally {
      await t.close();
      await stub.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
