import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { callJson } from '../helpers/server.js';
import { type SandboxNube, startSandboxNube, stopSandboxNube, until } from '../sandboxes/helpers.js';

// Issue 32 item 1: workspaces, their CRUD, resources created in and listed by them, keys narrowed to
// them, the 409 and force of a delete, their events and per-workspace usage; over HTTP, on both stores.
describe.each(DIALECTS)('workspaces on %s', (dialect) => {
  let t: SandboxNube;
  let hook: Server;
  let hookUrl: string;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  const as = (key: string) => async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const r = await callJson(t.baseUrl, method, path, body, { authorization: `Bearer ${key}` });
    return { status: r.status, body: r.body };
  };
  const call = (method: string, path: string, body?: unknown) => t.call(method, path, body);
  const workspace = async (name: string): Promise<string> => {
    const r = await call('POST', '/workspaces', { name });
    expect(r.status).toBe(201);
    return r.body.id;
  };
  const mint = async (body: Record<string, unknown>, key?: string) => {
    const r = key ? await as(key)('POST', '/account/keys', body) : await call('POST', '/account/keys', body);
    return r;
  };
  /** A DONE file: its record, then its bytes through putUrl. */
  const uploadFile = async (c: ReturnType<typeof as> | typeof call, name: string, workspaceId?: string) => {
    const r = await c('POST', '/files', { fileName: name, contentType: 'text/plain', size: 5, ...(workspaceId ? { workspaceId } : {}) });
    expect(r.status).toBe(201);
    const put = await fetch(r.body.putUrl, { method: 'PUT', body: 'hello', headers: { 'content-type': 'text/plain' } });
    expect(put.status).toBeLessThan(300);
    return r.body.file;
  };

  beforeAll(async () => {
    hook = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
    hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
    t = await startSandboxNube(`ws32-${dialect}`, { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' }, undefined, { dialect });
  });
  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    hook?.close();
  });

  it('every account has the default workspace; CRUD with names unique per account; bad input is 400', async () => {
    const list = await call('GET', '/workspaces');
    expect(list.status).toBe(200);
    expect(list.body.items[0]).toMatchObject({ id: 'default', name: 'default', isDefault: true });
    // An account made after the start has its default too (it is never a row to backfill).
    const other = await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' });
    const otherCall = as(other.secret);
    expect((await otherCall('GET', '/workspaces')).body.items.map((w: { id: string }) => w.id)).toEqual(['default']);

    expect((await call('POST', '/workspaces', { name: '' })).status).toBe(400);
    const long = await call('POST', '/workspaces', { name: 'x'.repeat(65) });
    expect(long.status).toBe(400);
    expect(long.body.issues[0].path).toContain('name');
    expect((await call('POST', '/workspaces', {})).status).toBe(400);
    const id = await workspace('staging');
    expect(id).toMatch(/^wsp_/);
    const dup = await call('POST', '/workspaces', { name: 'staging' });
    expect(dup.status).toBe(409);
    expect(dup.body.code).toBe('WorkspaceNameTaken');
    expect((await call('POST', '/workspaces', { name: 'default' })).status).toBe(409);
    // Names are per account: another account may use the same.
    const theirs = await otherCall('POST', '/workspaces', { name: 'staging' });
    expect(theirs.status).toBe(201);
    expect((await call('GET', `/workspaces/${theirs.body.id}`)).status).toBe(404);
    expect((await call('DELETE', `/workspaces/${theirs.body.id}`)).status).toBe(404);

    const got = await call('GET', `/workspaces/${id}`);
    expect(got.body).toMatchObject({ id, name: 'staging', isDefault: false, resources: {} });
    await workspace('prod');
    expect((await call('PATCH', `/workspaces/${id}`, { name: 'prod' })).status).toBe(409);
    const renamed = await call('PATCH', `/workspaces/${id}`, { name: 'stage' });
    expect(renamed.status).toBe(200);
    expect(renamed.body.name).toBe('stage');
    const renameDefault = await call('PATCH', '/workspaces/default', { name: 'main' });
    expect(renameDefault.status).toBe(409);
    expect(renameDefault.body.code).toBe('DefaultWorkspace');
    const delDefault = await call('DELETE', '/workspaces/default');
    expect(delDefault.status).toBe(409);
    expect(delDefault.body.error).toContain('default workspace cannot be deleted');
    expect((await call('GET', '/workspaces/wsp_nosuch')).status).toBe(404);
    expect((await call('DELETE', `/workspaces/${id}`)).status).toBe(200);
    expect((await call('GET', `/workspaces/${id}`)).status).toBe(404);
  });

  it('rows made before workspaces (no workspace_id written) are in the default workspace', async () => {
    const now = Date.now();
    const ownerId = (await call('GET', '/account')).body.id;
    // As an older release inserted it: every column but workspace_id.
    await t.nube.deps.store.db
      .insertInto('webhooks')
      .values({
        id: `wh_old${now}`,
        owner_id: ownerId,
        url: hookUrl,
        events: '["file.created"]',
        status: 'ACTIVE',
        secret: t.nube.deps.secretBox.seal('whsec_old'),
        failure_count: 0,
        last_delivery_at: null,
        last_error: null,
        created_at: now,
        updated_at: now,
      } as never)
      .execute();
    const got = await call('GET', `/webhooks/wh_old${now}`);
    expect(got.body.workspaceId).toBe('default');
    const listed = await call('GET', '/webhooks?workspaceId=default');
    expect(listed.body.items.map((w: { id: string }) => w.id)).toContain(`wh_old${now}`);
    expect((await call('DELETE', `/webhooks/wh_old${now}`)).status).toBe(200);
  });

  it('resources are created in a workspace and lists filter by it; an unknown or foreign workspace is 404', async () => {
    const ws = await workspace('filters');
    const sbx = await call('POST', '/sandboxes', { template: 'base', workspaceId: ws });
    expect(sbx.status).toBe(200);
    expect(sbx.body.workspaceId).toBe(ws);
    const sbxDefault = await call('POST', '/sandboxes', { template: 'base' });
    expect(sbxDefault.body.workspaceId).toBe('default');
    const db = await call('POST', '/databases', { name: 'in-ws', workspaceId: ws });
    expect(db.status).toBe(201);
    expect(db.body.workspaceId).toBe(ws);
    const dbDefault = await call('POST', '/databases', { name: 'in-default' });
    expect(dbDefault.body.workspaceId).toBe('default');
    const file = await uploadFile(call, 'a.txt', ws);
    expect(file.workspaceId).toBe(ws);
    const fileDefault = await uploadFile(call, 'b.txt');
    const wh = await call('POST', '/webhooks', { url: hookUrl, events: ['file.created'], workspaceId: ws });
    expect(wh.status).toBe(201);
    expect(wh.body.workspaceId).toBe(ws);
    const doc = await call('POST', '/documents', { name: 'Doc', sections: [{ body: 'uno' }], workspaceId: ws });
    expect(doc.status).toBe(200);
    expect(doc.body.document.workspaceId).toBe(ws);
    const fleetAgent = await call('POST', '/fleet-agents', { name: 'helper', workspaceId: ws });
    expect(fleetAgent.status).toBe(200);
    expect(fleetAgent.body.workspaceId).toBe(ws);

    const ids = async (path: string, key: string) => {
      const r = await call('GET', path);
      expect(r.status).toBe(200);
      return r.body[key].map((x: { id: string }) => x.id);
    };
    expect(await ids(`/sandboxes?workspaceId=${ws}`, 'sandboxes')).toEqual([sbx.body.id]);
    expect(await ids('/sandboxes?workspaceId=default', 'sandboxes')).toEqual([sbxDefault.body.id]);
    expect(await ids('/sandboxes', 'sandboxes')).toHaveLength(2);
    expect(await ids(`/databases?workspaceId=${ws}`, 'items')).toEqual([db.body.id]);
    expect(await ids('/databases', 'items')).toEqual(expect.arrayContaining([db.body.id, dbDefault.body.id]));
    expect(await ids(`/files?workspaceId=${ws}`, 'items')).toEqual([file.id]);
    expect(await ids('/files?workspaceId=default', 'items')).toEqual([fileDefault.id]);
    expect(await ids(`/webhooks?workspaceId=${ws}`, 'items')).toEqual([wh.body.id]);
    expect(await ids(`/documents?workspaceId=${ws}`, 'items')).toEqual([doc.body.document.id]);
    expect(await ids('/documents?workspaceId=default', 'items')).toEqual([]);

    expect((await call('GET', '/databases?workspaceId=wsp_nosuch')).status).toBe(404);
    expect((await call('POST', '/databases', { name: 'nowhere', workspaceId: 'wsp_nosuch' })).status).toBe(404);
    const foreign = await t.nube.services.account.createAccount({ name: 'foreign', plan: 'mega' });
    const theirs = (await as(foreign.secret)('POST', '/workspaces', { name: 'theirs' })).body.id;
    expect((await call('POST', '/webhooks', { url: hookUrl, events: ['file.created'], workspaceId: theirs })).status).toBe(404);
    expect((await call('GET', `/sandboxes?workspaceId=${theirs}`)).status).toBe(404);

    const got = await call('GET', `/workspaces/${ws}`);
    expect(got.body.resources).toEqual({ sandboxes: 1, databases: 1, files: 1, webhooks: 1, documents: 1, fleet: 1 });
    const usage = await call('GET', '/account/usage');
    const per = usage.body.workspaces.find((w: { id: string }) => w.id === ws);
    expect(per.resources).toEqual({ sandboxes: 1, databases: 1, files: 1, webhooks: 1, documents: 1, fleet: 1 });
    expect(per.storageBytes).toBeGreaterThanOrEqual(5);
    // The plan's allowances stay per account.
    expect(usage.body.databases.used).toBeGreaterThanOrEqual(2);

    // Delete refuses while the workspace holds resources, naming them; force deletes them as their DELETEs would.
    const refused = await call('DELETE', `/workspaces/${ws}`);
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('WorkspaceNotEmpty');
    expect(refused.body.resources).toEqual({ sandboxes: 1, databases: 1, files: 1, webhooks: 1, documents: 1, fleet: 1 });
    const forced = await call('DELETE', `/workspaces/${ws}?force=true`);
    expect(forced.status).toBe(200);
    expect(forced.body.deleted).toEqual({ sandboxes: 1, databases: 1, files: 1, webhooks: 1, documents: 1, fleet: 1 });
    expect((await call('GET', `/sandboxes/${sbx.body.id}`)).status).toBe(404);
    expect((await call('GET', `/databases/${db.body.id}`)).status).toBe(404);
    expect((await call('GET', `/webhooks/${wh.body.id}`)).status).toBe(404);
    expect((await call('GET', `/documents/${doc.body.document.id}`)).status).toBe(404);
    expect((await call('GET', `/fleet-agents/${fleetAgent.body.id}`)).status).toBe(404);
    // A file goes to the trash, as DELETE /files/{id} sends it.
    expect((await call('GET', `/files/${file.id}`)).body.status).toBe('DELETED');
    expect((await call('GET', `/workspaces/${ws}`)).status).toBe(404);
    // The default workspace's resources are untouched.
    expect((await call('GET', `/sandboxes/${sbxDefault.body.id}`)).status).toBe(200);
    expect((await call('GET', `/databases/${dbDefault.body.id}`)).status).toBe(200);
    await call('DELETE', `/sandboxes/${sbxDefault.body.id}`);
    await call('DELETE', `/databases/${dbDefault.body.id}`);
    await call('DELETE', `/files/${fileDefault.id}`);
  });

  it('a workspace-scoped key reaches, lists and creates only in its workspaces', async () => {
    const a = await workspace('key-a');
    const b = await workspace('key-b');
    const dbA = (await call('POST', '/databases', { name: 'key-a-db', workspaceId: a })).body;
    const dbDefault = (await call('POST', '/databases', { name: 'key-default-db' })).body;
    const docDefault = (await call('POST', '/documents', { name: 'Other', sections: [{ body: 'dos' }] })).body.document;
    const scopes = ['databases:write', 'documents:write', 'files:write', 'webhooks:write', 'workspaces:write', 'account:write'];
    const k = await mint({ name: 'ws-a', scopes, workspaceIds: [a] });
    expect(k.status).toBe(201);
    expect(k.body.workspaceIds).toEqual([a]);
    const key = as(k.body.secret);

    // Reach: its workspace's resources; every other is a 404, as another account's.
    expect((await key('GET', `/databases/${dbA.id}`)).status).toBe(200);
    expect((await key('GET', `/databases/${dbDefault.id}`)).status).toBe(404);
    expect((await key('POST', `/databases/${dbDefault.id}/query`, { sql: 'select 1' })).status).toBe(404);
    expect((await key('DELETE', `/databases/${dbDefault.id}`)).status).toBe(404);
    expect((await key('GET', `/documents/${docDefault.id}`)).status).toBe(404);
    // Lists: only its workspace; naming another is 404.
    expect((await key('GET', '/databases')).body.items.map((d: { id: string }) => d.id)).toEqual([dbA.id]);
    expect((await key('GET', '/databases?workspaceId=default')).status).toBe(404);
    expect((await key('GET', `/databases?workspaceId=${b}`)).status).toBe(404);
    expect((await key('GET', '/workspaces')).body.items.map((w: { id: string }) => w.id)).toEqual([a]);
    expect((await key('GET', `/workspaces/${b}`)).status).toBe(404);
    // Creates land in its one workspace; another is 404.
    const made = await key('POST', '/databases', { name: 'made-by-key' });
    expect(made.status).toBe(201);
    expect(made.body.workspaceId).toBe(a);
    expect((await key('POST', '/databases', { name: 'elsewhere', workspaceId: b })).status).toBe(404);
    expect((await key('POST', '/databases', { name: 'elsewhere', workspaceId: 'default' })).status).toBe(404);
    const f = await uploadFile(key, 'k.txt');
    expect(f.workspaceId).toBe(a);
    // Usage shows its workspaces only.
    expect((await key('GET', '/account/usage')).body.workspaces.map((w: { id: string }) => w.id)).toEqual([a]);
    // It cannot make a workspace, nor a key wider than itself.
    expect((await key('POST', '/workspaces', { name: 'mine' })).status).toBe(403);
    const wider = await mint({ name: 'wider', scopes: ['databases:read'], workspaceIds: [a, b] }, k.body.secret);
    expect(wider.status).toBe(403);
    expect(wider.body.code).toBe('KeyScopeTooWide');
    const child = await mint({ name: 'child', scopes: ['databases:read'] }, k.body.secret);
    expect(child.status).toBe(201);
    expect(child.body.workspaceIds).toEqual([a]);
    expect((await as(child.body.secret)('GET', `/databases/${dbDefault.id}`)).status).toBe(404);

    // A key of two workspaces must name one when it creates.
    const two = await mint({ name: 'ws-ab', scopes, workspaceIds: [a, b] });
    const twoKey = as(two.body.secret);
    const ask = await twoKey('POST', '/databases', { name: 'which' });
    expect(ask.status).toBe(400);
    expect(ask.body.issues[0].path).toEqual(['body', 'workspaceId']);
    expect((await twoKey('POST', '/databases', { name: 'which', workspaceId: b })).body.workspaceId).toBe(b);
    expect((await twoKey('GET', '/databases')).body.items).toHaveLength(3);
    // Unknown and foreign workspaces at key creation are a 404, never a key narrowed to nothing.
    expect((await mint({ name: 'nope', scopes: ['databases:read'], workspaceIds: ['wsp_nosuch'] })).status).toBe(404);

    // MCP: tools/list shows only what its scope allows, and its calls see only its workspace.
    const client = new Client({ name: 'ws-scoped', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${k.body.secret}` } } }),
    );
    const names = (await client.listTools()).tools.map((x) => x.name);
    expect(names).toContain('databases_list');
    expect(names).toContain('workspaces_list');
    expect(names).not.toContain('sandboxes_create');
    const listed = await client.callTool({ name: 'databases_list', arguments: {} });
    expect((listed.structuredContent as { items: { id: string }[] }).items.map((d) => d.id).sort()).toEqual([dbA.id, made.body.id].sort());
    const other = await client.callTool({ name: 'databases_get', arguments: { dbId: dbDefault.id } });
    expect(other.isError).toBe(true);
    expect((other.structuredContent as { code: string }).code).toBe('NotFound');
    await client.close();

    for (const id of [dbA.id, dbDefault.id, made.body.id]) await call('DELETE', `/databases/${id}`);
    await call('DELETE', `/documents/${docDefault.id}`);
    await call('DELETE', `/workspaces/${a}?force=true`);
    await call('DELETE', `/workspaces/${b}?force=true`);
  });

  it('custom domains belong to a workspace: created in one, listed by it, reached by its keys only, removed with it', async () => {
    // Custom domains come with Mega: an account of its own.
    const acc = await t.nube.services.account.createAccount({ name: 'domains-ws', plan: 'mega' });
    const owner = as(acc.secret);
    const ws = (await owner('POST', '/workspaces', { name: 'web' })).body.id as string;
    const inWs = await owner('POST', '/domains', { domain: 'a.ws-test.example', workspaceId: ws });
    expect(inWs.status, JSON.stringify(inWs.body)).toBe(201);
    expect(inWs.body.workspaceId).toBe(ws);
    const elsewhere = await owner('POST', '/domains', { domain: 'b.ws-test.example' });
    expect(elsewhere.body.workspaceId).toBe('default');
    expect((await owner('POST', '/domains', { domain: 'c.ws-test.example', workspaceId: 'wsp_unknown' })).status).toBe(404);
    const listed = await owner('GET', `/domains?workspaceId=${ws}`);
    expect(listed.body.domains.map((d: { domain: string }) => d.domain)).toEqual(['a.ws-test.example']);
    expect((await owner('GET', '/domains')).body.domains).toHaveLength(2);

    const k = await as(acc.secret)('POST', '/account/keys', { name: 'web only', scopes: ['domains:write'], workspaceIds: [ws] });
    expect(k.status, JSON.stringify(k.body)).toBe(201);
    const key = as(k.body.secret);
    expect((await key('GET', '/domains')).body.domains.map((d: { domain: string }) => d.domain)).toEqual(['a.ws-test.example']);
    expect((await key('GET', '/domains/a.ws-test.example')).status).toBe(200);
    // The default workspace's domain is as good as another account's: 404 by every path, re-adding included.
    expect((await key('GET', '/domains/b.ws-test.example')).status).toBe(404);
    expect((await key('POST', '/domains/b.ws-test.example/detach', {})).status).toBe(404);
    expect((await key('DELETE', '/domains/b.ws-test.example')).status).toBe(404);
    expect((await key('POST', '/domains', { domain: 'b.ws-test.example' })).status).toBe(404);
    const made = await key('POST', '/domains', { domain: 'c.ws-test.example' });
    expect(made.status).toBe(201);
    expect(made.body.workspaceId).toBe(ws);

    const refused = await owner('DELETE', `/workspaces/${ws}`);
    expect(refused.status).toBe(409);
    expect(refused.body.resources).toEqual({ domains: 2 });
    const forced = await owner('DELETE', `/workspaces/${ws}?force=true`);
    expect(forced.status, JSON.stringify(forced.body)).toBe(200);
    expect(forced.body.deleted).toEqual({ domains: 2 });
    expect((await owner('GET', '/domains')).body.domains.map((d: { domain: string }) => d.domain)).toEqual(['b.ws-test.example']);
  });

  it('workspace.created and workspace.deleted are emitted; a workspace webhook hears only its workspace', async () => {
    const all = await call('POST', '/webhooks', { url: hookUrl, events: ['workspace.created', 'workspace.deleted', 'database.created'] });
    const ws = await workspace('evented');
    const inWs = await call('POST', '/webhooks', { url: hookUrl, events: ['database.created', 'workspace.deleted'], workspaceId: ws });
    const dbIn = (await call('POST', '/databases', { name: 'ev-in', workspaceId: ws })).body;
    const dbOut = (await call('POST', '/databases', { name: 'ev-out' })).body;
    const events = async (id: string) =>
      (await call('GET', `/webhooks/${id}/deliveries?limit=100`)).body.items.map((d: { event: string }) => d.event).sort();
    // Both creates fanned out (the account-wide webhook heard both); the workspace's heard its own only.
    await until(() => events(all.body.id), (e) => e.length >= 3, 15_000);
    expect(await events(inWs.body.id)).toEqual(['database.created']);
    expect((await call('DELETE', `/workspaces/${ws}?force=true`)).status).toBe(200);
    const seen = await until(() => events(all.body.id), (e) => e.length >= 4, 15_000);
    expect(seen).toEqual(['database.created', 'database.created', 'workspace.created', 'workspace.deleted']);
    const delivered = await call('GET', `/webhooks/${all.body.id}/deliveries?limit=100`);
    const created = delivered.body.items.find((d: { event: string }) => d.event === 'workspace.created');
    expect(created).toBeTruthy();
    // The workspace webhook was deleted with its workspace.
    expect((await call('GET', `/webhooks/${inWs.body.id}`)).status).toBe(404);
    expect(dbIn.workspaceId).toBe(ws);
    await call('DELETE', `/databases/${dbOut.id}`);
    await call('DELETE', `/webhooks/${all.body.id}`);
  });
});
