// The credential reach table's rows for presigned file URLs (`/blob/<token>`) and scoped owner keys
// (src/platform/credential-reach.ts): each reaches what its row says and nothing else, swept over every
// registry operation and the entry points outside it. The checkout token's row is swept in
// test/machines/checkout.test.ts (it needs a machine order). Both metadata stores.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operations } from '../../src/areas/index.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { ScopeCatalog } from '../../src/platform/scope-catalog.js';
import { DIALECTS } from '../helpers/pg.js';
import { upgradeStatus } from '../helpers/upgrade-status.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

const fill = (path: string) => path.replace(/\{[A-Za-z0-9_]+\}/g, 'x0');

/** Every registry operation (not WebSockets) called with `headers` (and `query`): [op id, status, body]. */
async function sweep(
  t: TestNube,
  headers: Record<string, string>,
  query = '',
): Promise<[string, number, string][]> {
  const out: [string, number, string][] = [];
  for (const op of operations.filter((o) => !o.websocket)) {
    const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
    const r = await fetch(`${t.baseUrl}/api/v2${fill(op.path)}${query}`, {
      method: op.method,
      headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
      body,
    });
    out.push([op.id, r.status, (await r.text()).slice(0, 600)]);
  }
  return out;
}

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
type Answer = { status: number; body: any };

describe.each(DIALECTS)('reach of presigned file URLs and scoped keys (%s)', (dialect) => {
  let t: TestNube;
  const call = (method: string, path: string, body?: unknown, auth = t.auth): Promise<Answer> =>
    callJson(t.baseUrl, method, path, body, auth);

  beforeAll(async () => {
    t = await startNube({ dialect, env: { NUBE_RATE_LIMIT_PER_MINUTE: '1000000' } });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it('the table has rows for both, rendered into docs/api.md', () => {
    const blob = CREDENTIAL_REACH.find((c) => c.credential.includes('/blob/<token>'));
    const scoped = CREDENTIAL_REACH.find((c) => c.operations === 'scoped');
    const checkout = CREDENTIAL_REACH.find((c) => c.credential.includes('/checkout/<token>'));
    expect(blob?.operations).toEqual([]);
    expect(checkout?.operations).toEqual([]);
    expect(scoped?.never).toContain('holder:');
  });

  it('/blob/<token>: an upload URL uploads its one file once; a read URL reads it; neither reaches anything else', async () => {
    const made = await call('POST', '/files', { fileName: 'a.txt', contentType: 'text/plain', size: 5 });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const put = new URL(made.body.putUrl);
    const putToken = put.pathname.split('/').pop()!;
    // An upload URL does not read.
    expect((await fetch(`${t.baseUrl}${put.pathname}`)).status).not.toBe(200);
    const up = await fetch(`${t.baseUrl}${put.pathname}${put.search}`, {
      method: 'PUT',
      headers: { 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(up.status, await up.text()).toBe(200);
    const again = await fetch(`${t.baseUrl}${put.pathname}${put.search}`, {
      method: 'PUT',
      headers: { 'content-type': 'text/plain' },
      body: 'again',
    });
    expect(again.status).toBe(403);
    const got = await call('GET', `/files/${made.body.file.id}`);
    const read = new URL(got.body.readUrl);
    const readToken = read.pathname.split('/').pop()!;
    const r = await fetch(`${t.baseUrl}${read.pathname}${read.search}`);
    expect(r.status).toBe(200);
    expect(await r.text()).toBe('hello');
    // A read URL does not upload.
    const over = await fetch(`${t.baseUrl}${read.pathname}${read.search}`, {
      method: 'PUT',
      headers: { 'content-type': 'text/plain' },
      body: 'evil!',
    });
    expect(over.status).not.toBe(200);
    expect(await (await fetch(`${t.baseUrl}${read.pathname}${read.search}`)).text()).toBe('hello');
    // Another file's path with this token: nothing.
    const other = await call('POST', '/files', { fileName: 'b.txt', contentType: 'text/plain', size: 1 });
    expect((await fetch(`${t.baseUrl}/blob/${other.body.file.id}${read.search}`)).status).not.toBe(200);
    // No API operation, as a bearer or as ?token=, nor MCP or a WebSocket.
    for (const token of [putToken, readToken]) {
      for (const [id, status, text] of [
        ...(await sweep(t, { authorization: `Bearer ${token}` })),
        ...(await sweep(t, {}, `?token=${token}`)),
      ]) {
        expect(status, `${id}: ${text}`).toBe(401);
      }
      expect(
        (
          await fetch(`${t.baseUrl}/api/mcp`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
            body: '{}',
          })
        ).status,
      ).toBe(401);
      expect(
        await upgradeStatus(`${t.baseUrl.replace('http', 'ws')}/api/v2/sandboxes/x0/terminal`, {
          authorization: `Bearer ${token}`,
        }),
      ).toBe(401);
    }
  }, 120_000);

  it('a scoped key: exactly the operations its scopes name; ScopeMissing elsewhere; no E2B, libSQL or terminal', async () => {
    const scopes = ['databases:read', 'files.get'];
    const k = await call('POST', '/account/keys', { name: 'reach', scopes });
    expect(k.status).toBe(201);
    const allowed = new ScopeCatalog(operations).compile(scopes);
    expect(
      allowed.has('databases.list') && allowed.has('files.get') && !allowed.has('databases.create'),
    ).toBe(true);
    const wrong: string[] = [];
    for (const [id, status, text] of await sweep(t, { authorization: `Bearer ${k.body.secret}` })) {
      const refused = status === 401 || (status === 403 && /ScopeMissing|CredentialNotAllowed/.test(text));
      if (allowed.has(id) === refused) wrong.push(`${id}: ${status} ${text}`);
    }
    expect(wrong).toEqual([]);
    const h = { authorization: `Bearer ${k.body.secret}` };
    expect(
      (await fetch(`${t.baseUrl}/e2b/sandboxes`, { headers: { 'x-api-key': k.body.secret } })).status,
    ).toBe(403);
    expect(
      (await fetch(`${t.baseUrl}/libsql/db_x0/v2/pipeline`, { method: 'POST', headers: h, body: '{}' }))
        .status,
    ).not.toBe(200);
    expect(await upgradeStatus(`${t.baseUrl.replace('http', 'ws')}/api/v2/sandboxes/x0/terminal`, h)).toBe(
      403,
    );
    // MCP lists exactly the allowed operations' tools.
    const client = new Client({ name: 'reach', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), { requestInit: { headers: h } }),
    );
    const tools = (await client.listTools()).tools.map((x) => x.name);
    await client.close();
    const ids = operations
      .filter((o) => allowed.has(o.id) && !o.websocket)
      .map((o) => o.id.replaceAll('.', '_'));
    expect(tools.sort()).toEqual(ids.filter((n) => tools.includes(n)).sort());
    expect(tools.every((n) => ids.includes(n))).toBe(true);
    // No key of its own without account:write (and never a wider one: test/platform/scoped-keys.test.ts).
    const wider = await call('POST', '/account/keys', { name: 'wider', scopes: ['databases:write'] }, h);
    expect(wider.status).toBe(403);
    expect(wider.body.code).toBe('ScopeMissing');
  }, 120_000);
});
