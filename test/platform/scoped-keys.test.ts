import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';

// Scoped owner keys (issue 32, items 2 and 3), end to end over REST and MCP, on both metadata stores.
describe.each(DIALECTS)('scoped keys on %s', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let dbId: string;
  let otherDbId: string;

  const mint = async (body: unknown, key?: string) => {
    const r = await call('POST', '/account/keys', body, key);
    return { status: r.status, body: await json(r) };
  };

  beforeAll(async () => {
    t = await startNube({ dialect });
    call = caller(t);
    dbId = (await json(await call('POST', '/databases', { name: 'one' }))).id;
    otherDbId = (await json(await call('POST', '/databases', { name: 'two' }))).id;
  });
  afterAll(() => t?.close());

  it('a scoped key reaches its scope and gets 403 ScopeMissing naming the scope it lacks elsewhere', async () => {
    const k = await mint({ name: 'reader', scopes: ['account:read', 'databases:read'] });
    expect(k.status).toBe(201);
    expect(k.body.scopes).toEqual(['account:read', 'databases:read']);
    expect((await call('GET', '/account', undefined, k.body.secret)).status).toBe(200);
    expect((await call('GET', '/databases', undefined, k.body.secret)).status).toBe(200);
    const refused = await call('POST', '/databases', { name: 'three' }, k.body.secret);
    expect(refused.status).toBe(403);
    const body = await json(refused);
    expect(body.code).toBe('ScopeMissing');
    expect(body.scope).toBe('databases:write');
    expect(body.error).toContain('databases:write');
    const q = await call('POST', `/databases/${dbId}/query`, { sql: 'select 1' }, k.body.secret);
    expect(q.status).toBe(403);
    // The listing shows each key's scope; full keys show null.
    const list = await json(await call('GET', '/account/keys'));
    const row = list.items.find((i: { id: string }) => i.id === k.body.id);
    expect(row.scopes).toEqual(['account:read', 'databases:read']);
    expect(list.items.find((i: { name: string }) => i.name === 'default').scopes).toBeNull();
  });

  it('a single operation id is a scope; writes include reads', async () => {
    const k = await mint({ name: 'query', scopes: ['databases.query'] });
    expect((await call('POST', `/databases/${dbId}/query`, { sql: 'select 1 as x' }, k.body.secret)).status).toBe(200);
    expect((await call('GET', `/databases/${dbId}`, undefined, k.body.secret)).status).toBe(403);
    const w = await mint({ name: 'dbw', scopes: ['databases:write'] });
    expect((await call('GET', `/databases/${dbId}`, undefined, w.body.secret)).status).toBe(200);
  });

  it('unknown scopes are a 400 listing the valid ones', async () => {
    const r = await mint({ name: 'x', scopes: ['databses:read', 'account:read'] });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('UnknownScope');
    expect(r.body.issues[0].path).toEqual(['body', 'scopes', 0]);
    expect(r.body.error).toContain('databases:read');
    expect(r.body.error).toContain('sandboxes:write');
  });

  it('resourceIds narrow a key to named resources; another account\'s id is a 404 at creation', async () => {
    const k = await mint({ name: 'one-db', scopes: ['databases:write', 'account:read'], resourceIds: [dbId] });
    expect(k.status).toBe(201);
    expect((await call('POST', `/databases/${dbId}/query`, { sql: 'select 1' }, k.body.secret)).status).toBe(200);
    const other = await call('POST', `/databases/${otherDbId}/query`, { sql: 'select 1' }, k.body.secret);
    expect(other.status).toBe(403);
    expect((await json(other)).code).toBe('ScopeMissing');
    // Lists and creates of a narrowed area are refused: they would reach past the named resources.
    expect((await call('GET', '/databases', undefined, k.body.secret)).status).toBe(403);
    // Other areas follow the scopes alone.
    expect((await call('GET', '/account', undefined, k.body.secret)).status).toBe(200);
    const unknown = await mint({ name: 'nope', scopes: ['databases:read'], resourceIds: ['db_doesnotexist'] });
    expect(unknown.status).toBe(404);
    const badPrefix = await mint({ name: 'nope', scopes: ['databases:read'], resourceIds: ['key_x'] });
    expect(badPrefix.status).toBe(400);
    expect(badPrefix.body.issues[0].path).toEqual(['body', 'resourceIds', 0]);
  });

  it('an expired key is a 401 saying it expired; expiresAt in the past is a 400', async () => {
    const soon = new Date(Date.now() + 300).toISOString();
    const k = await mint({ name: 'short', scopes: ['account:read'], expiresAt: soon });
    expect(k.status).toBe(201);
    expect((await call('GET', '/account', undefined, k.body.secret)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 400));
    const r = await call('GET', '/account', undefined, k.body.secret);
    expect(r.status).toBe(401);
    const body = await json(r);
    expect(body.code).toBe('KeyExpired');
    expect(body.error).toContain('expired');
    const past = await mint({ name: 'past', scopes: ['account:read'], expiresAt: new Date(Date.now() - 1000).toISOString() });
    expect(past.status).toBe(400);
    expect(past.body.issues[0].path).toEqual(['body', 'expiresAt']);
  });

  it('allowedIps refuses other source addresses with 403', async () => {
    const here = await mint({ name: 'local', scopes: ['account:read'], allowedIps: ['127.0.0.0/8', '::1'] });
    expect((await call('GET', '/account', undefined, here.body.secret)).status).toBe(200);
    const there = await mint({ name: 'far', scopes: ['account:read'], allowedIps: ['203.0.113.7'] });
    const r = await call('GET', '/account', undefined, there.body.secret);
    expect(r.status).toBe(403);
    expect((await json(r)).code).toBe('AddressNotAllowed');
    const bad = await mint({ name: 'bad', scopes: ['account:read'], allowedIps: ['not-an-ip'] });
    expect(bad.status).toBe(400);
  });

  it('a scoped key creates keys only within its own scope, and revokes only its own', async () => {
    const parent = await mint({ name: 'parent', scopes: ['account:write', 'databases:read'], resourceIds: [dbId] });
    const s = parent.body.secret;
    const child = await mint({ name: 'child', scopes: ['databases:read'] }, s);
    expect(child.status).toBe(201);
    expect(child.body.resourceIds).toEqual([dbId]); // inherited, never wider
    const wider = await mint({ name: 'wider', scopes: ['databases:write'] }, s);
    expect(wider.status).toBe(403);
    expect(wider.body.code).toBe('KeyScopeTooWide');
    expect((await mint({ name: 'full' }, s)).status).toBe(403);
    expect((await mint({ name: 'other', scopes: ['databases:read'], resourceIds: [otherDbId] }, s)).status).toBe(403);
    const defaultKey = (await json(await call('GET', '/account/keys'))).items.find((i: { name: string }) => i.name === 'default');
    expect((await call('DELETE', `/account/keys/${defaultKey.id}`, undefined, s)).status).toBe(404);
    expect((await call('DELETE', `/account/keys/${child.body.id}`, undefined, s)).status).toBe(200);
    expect((await call('GET', '/account', undefined, t.ownerKey)).status).toBe(200);
  });

  it('an unknown workspace is a 404; every cap is taken; a full key takes no limits without scopes', async () => {
    expect((await mint({ name: 'ws', scopes: ['account:read'], workspaceIds: ['ws_1'] })).status).toBe(404);
    expect((await mint({ name: 'cpu', scopes: ['account:read'], caps: { sandboxCpuSeconds: 10 } })).status).toBe(201);
    expect((await mint({ name: 'llm', scopes: ['account:read'], caps: { llmTokens: 10 } })).status).toBe(201);
    expect((await mint({ name: 'web', scopes: ['web:read'], caps: { webQueries: 10 } })).status).toBe(201);
    expect((await mint({ name: 'nolimit', resourceIds: [dbId] })).status).toBe(400);
  });

  it('a scoped key is refused at entry points outside REST and MCP (E2B, libSQL)', async () => {
    const k = await mint({ name: 'sbx', scopes: ['sandboxes:write', 'databases:write'] });
    const e2b = await fetch(`${t.baseUrl}/e2b/sandboxes`, { headers: { 'x-api-key': k.body.secret } });
    expect(e2b.status).toBe(403);
    expect((await fetch(`${t.baseUrl}/e2b/sandboxes`, { headers: { 'x-api-key': t.ownerKey } })).status).toBe(200);
  });

  it('MCP lists only the tools the key may call and refuses the rest the same way', async () => {
    const k = await mint({ name: 'mcp', scopes: ['account:read', 'databases.query'] });
    const client = new Client({ name: 'scoped', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${k.body.secret}` } } }),
    );
    const names = (await client.listTools()).tools.map((x) => x.name).sort();
    expect(names).toEqual(['account_get', 'account_audit', 'account_keys_list', 'account_llmBalance', 'account_usage', 'account_aiKey_get', 'account_scopes', 'databases_query'].sort());
    const ok = await client.callTool({ name: 'databases_query', arguments: { dbId, body: { sql: 'select 1' } } });
    expect(ok.structuredContent).not.toHaveProperty('code');
    expect(ok.isError).toBe(false);
    const no = await client.callTool({ name: 'databases_create', arguments: { name: 'x' } });
    expect(no.isError).toBe(true);
    expect((no.structuredContent as { code: string; scope: string }).code).toBe('ScopeMissing');
    expect((no.structuredContent as { scope: string }).scope).toBe('databases:write');
    await client.close();
  });
});
