import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operations } from '../../src/areas/index.js';
import { startNube, type TestNube } from '../helpers/server.js';

let t: TestNube;
beforeAll(async () => {
  t = await startNube();
});
afterAll(() => t.close());

async function connect(key: string): Promise<Client> {
  const client = new Client({ name: 'nube-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return client;
}

describe('MCP at /api/mcp', () => {
  it('lists every operation as a tool and runs one as the caller', async () => {
    const client = await connect(t.ownerKey);
    const { tools } = await client.listTools();
    expect(tools.length).toBe(operations.length);
    const get = tools.find((x) => x.name === 'account_get');
    expect(get?.inputSchema.type).toBe('object');
    const r = await client.callTool({ name: 'account_get', arguments: {} });
    expect(r.isError).toBe(false);
    const sc = r.structuredContent as { plan: { name: string } };
    expect(sc.plan.name).toBe('tera');
    expect(JSON.parse((r.content as { text: string }[])[0]!.text)).toEqual(sc);
    await client.close();
  });

  it('returns isError with the REST error body for 4xx', async () => {
    const client = await connect(t.ownerKey);
    const bad = await client.callTool({ name: 'account_keys_create', arguments: { name: '' } });
    expect(bad.isError).toBe(true);
    expect((bad.structuredContent as { code: string }).code).toBe('ValidationError');
    const missing = await client.callTool({ name: 'account_keys_revoke', arguments: { keyId: 'key_nope' } });
    expect(missing.isError).toBe(true);
    expect((missing.structuredContent as { code: string }).code).toBe('NotFound');
    await client.close();
  });

  it('tools/call creates a key that then works over REST', async () => {
    const client = await connect(t.ownerKey);
    const r = await client.callTool({ name: 'account_keys_create', arguments: { name: 'from-mcp' } });
    const secret = (r.structuredContent as { secret: string }).secret;
    const rest = await fetch(`${t.baseUrl}/api/v2/account`, { headers: { authorization: `Bearer ${secret}` } });
    expect(rest.status).toBe(200);
    await client.close();
  });

  it('refuses a connection without a valid credential', async () => {
    const r = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(r.status).toBe(401);
    await expect(connect('nube_sk_live_wrongwrongwrongwrongwrongwrongwrong')).rejects.toThrow();
  });
});
