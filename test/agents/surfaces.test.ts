// The same agents through MCP (tools derived from the registry) and through the SDK, SSE included.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Nube } from '../../packages/sdk/src/index.js';
import { type AgentNube, startAgentNube } from './helpers.js';

describe('agents over MCP and the SDK', () => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;

  beforeAll(async () => {
    t = await startAgentNube('surfaces');
    a = await t.agent();
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('MCP: agents_try and agents_message are tools that run a turn', async () => {
    const mcp = async (name: string, args: unknown) => {
      const r = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: { ...t.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } }),
      });
      return ((await r.json()) as { result: { isError?: boolean; content: { text: string }[] } }).result;
    };
    const tried = await mcp('agents_try', { id: a.id, text: 'por mcp' });
    expect(tried.isError).toBeFalsy();
    expect(JSON.parse(tried.content[0]!.text)).toMatchObject({ text: 'echo: por mcp', error: null });
    const streamed = await mcp('agents_message', { id: a.id, content: 'stream por mcp' });
    const events = streamed.content[0]!.text
      .split('\n\n')
      .filter(Boolean)
      .map((e) => JSON.parse(e.replace(/^data: /, '')) as { type: string; value?: string });
    expect(events.filter((e) => e.type === 'chunk').map((e) => e.value).join('')).toBe('echo: stream por mcp');
    expect(events.at(-1)).toEqual({ type: 'done', session: expect.stringMatching(/^ses_/) });
  });

  it('SDK: agents.message() is an event stream of chunk, usage and done; try, get and list are typed calls', async () => {
    const nube = new Nube({ apiKey: t.ownerKey, baseUrl: t.baseUrl });
    const stream = await nube.agents.message(a.id, { content: 'hola sdk' });
    const events = [];
    for await (const e of stream) events.push(e.json() as { type: string; value?: string });
    expect(events.filter((e) => e.type === 'chunk').map((e) => e.value).join('')).toBe('echo: hola sdk');
    expect(events.map((e) => e.type).slice(-2)).toEqual(['usage', 'done']);
    const tried = await nube.agents.try(a.id, { text: 'otra vez' });
    expect(tried.text).toBe('echo: otra vez');
    expect((await nube.agents.get(a.id)).status).toBe('running');
    expect((await nube.agents.list()).agents).toHaveLength(1);
  });
});
