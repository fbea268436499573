// The standing adversarial test of credentials (issue 27): every operation of the registry, and the
// entry points outside it (MCP, an agent's ACP WebSocket, libSQL, E2B's control plane, the registry's
// WebSockets), called with one real credential of each kind. What src/platform/credential-reach.ts
// lists for a credential must not be refused for want of rights; everything else must be refused (401,
// or 403 CredentialNotAllowed) before it touches anything. A new route that takes a token by accident
// fails here (and in test/registry.test.ts, which compares the table with the registry).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { operations } from '../../src/areas/index.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { BASE62, newId, randomToken } from '../../src/platform/ids.js';
import { startNube, type TestNube } from '../helpers/server.js';

interface Credential {
  name: string;
  secret: string;
  /** Registry operations it may call (the table's row). */
  allowed: ReadonlySet<string>;
}

const reachOf = (scheme: string) => new Set(CREDENTIAL_REACH.find((c) => c.scheme === scheme)?.operations as string[]);

describe('credentials: each reaches what its holder needs, nothing more', () => {
  let t: TestNube;
  let creds: Credential[];
  let dbId: string;
  let agentId: string;

  beforeAll(async () => {
    t = await startNube({ env: { NUBE_RATE_LIMIT_PER_MINUTE: '1000000' } });
    const call = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
        method,
        headers: { authorization: `Bearer ${t.ownerKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      // biome-ignore lint/suspicious/noExplicitAny: test reads arbitrary JSON
      const j = (await r.json()) as any;
      if (r.status >= 300) throw new Error(`${method} ${path} answered ${r.status}: ${JSON.stringify(j)}`);
      return j;
    };
    const owner = (await call('GET', '/account')).id as string;
    // An agent row with a known embed token (building one needs sandboxes and an LLM, not what is tested).
    const embed = `agt_${randomToken(40, BASE62)}`;
    const hash = sha256Hex(embed);
    agentId = newId('agt');
    const now = Date.now();
    await t.nube.deps.store.db
      .insertInto('agents')
      .values({
        id: agentId,
        owner_id: owner,
        name: 'embedded',
        template: 'acp',
        status: 'lost',
        sandbox_id: null,
        embed_lookup: hash.slice(0, 16),
        embed_hash: hash,
        secrets_sealed: t.nube.deps.secretBox.seal(JSON.stringify({ env: {}, mcpServers: [], token: 'x' })),
        seed_files: '[]',
        timeout_seconds: 3600,
        error: null,
        default_session_id: null,
        node_id: t.nube.deps.nodes.id,
        created_at: now,
        updated_at: now,
      })
      .execute();
    const fleet = await call('POST', '/fleet-agents', { name: 'f' });
    const pk = await call('POST', `/fleet-agents/${fleet.id}/public-keys`, { groupId: 'web-0b7c6f0e-8d1a-4a55-9a55-5b9b8f1d2c3e' });
    const client = await call('POST', '/fleet-client-credentials', { name: 'c' });
    const doc = await call('POST', '/documents', { name: 'd' });
    const share = await call('POST', '/share-tokens', { documentId: doc.document.id });
    const db = await call('POST', '/databases', { name: 'reach' });
    dbId = db.id;
    const dbToken = await call('POST', `/databases/${db.id}/tokens`, {});
    const llm = await t.nube.services.llm.issueCredential(owner, 'test:reach', null);
    creds = [
      { name: 'agt_', secret: embed, allowed: reachOf('agent') },
      { name: 'flt_tk_', secret: fleet.token, allowed: reachOf('fleetAgent') },
      { name: 'flt_pk_', secret: pk.key, allowed: reachOf('fleetPublic') },
      { name: 'nube_cc_', secret: client.credential, allowed: reachOf('client') },
      { name: 'shr_', secret: share.token, allowed: reachOf('share') },
      { name: 'nube_db_', secret: dbToken.token, allowed: reachOf('database') },
      { name: 'nube_llm_', secret: llm, allowed: new Set() },
    ];
  }, 60_000);
  afterAll(() => t?.close());

  const fill = (path: string) => path.replace(/\{[A-Za-z0-9_]+\}/g, (m) => (m === '{dbId}' ? dbId : m === '{id}' ? agentId : 'x0'));
  /** Refused for want of rights: 401, or 403 CredentialNotAllowed (nothing ran). */
  const refused = (status: number, body: string) => status === 401 || (status === 403 && body.includes('CredentialNotAllowed'));

  it('every registry operation: the table\'s operations only', async () => {
    const wrong: string[] = [];
    for (const c of creds) {
      for (const op of operations.filter((o) => !o.websocket)) {
        const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
        // The share token travels as ?token= (PDF export), the others as a bearer.
        const url = `${t.baseUrl}/api/v2${fill(op.path)}${c.name === 'shr_' ? `?token=${c.secret}` : ''}`;
        const r = await fetch(url, {
          method: op.method,
          headers: { ...(c.name === 'shr_' ? {} : { authorization: `Bearer ${c.secret}` }), ...(body ? { 'content-type': 'application/json' } : {}) },
          body,
        });
        const text = await r.text();
        const isRefused = refused(r.status, text);
        if (c.allowed.has(op.id) === isRefused) wrong.push(`${c.name} ${op.id} ${op.method} ${op.path}: ${r.status} ${text.slice(0, 120)}`);
      }
    }
    expect(wrong).toEqual([]);
  }, 120_000);

  it("the registry's WebSockets and an agent's ACP WebSocket refuse every scoped credential", async () => {
    const paths = [...operations.filter((o) => o.websocket).map((o) => fill(o.path)), `/agents/${agentId}/acp`];
    expect(paths.length).toBeGreaterThan(1);
    const wrong: string[] = [];
    for (const c of creds) {
      for (const p of paths) {
        for (const how of ['header', 'query'] as const) {
          const url = `${t.baseUrl.replace(/^http/, 'ws')}/api/v2${p}${how === 'query' ? `?token=${encodeURIComponent(c.secret)}` : ''}`;
          const status = await new Promise<number>((resolve) => {
            const ws = new WebSocket(url, { headers: how === 'header' ? { authorization: `Bearer ${c.secret}` } : {} });
            ws.once('open', () => {
              ws.close();
              resolve(101);
            });
            ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
            ws.once('error', () => resolve(0));
          });
          if (status !== 401 && status !== 403) wrong.push(`${c.name} ${how} ${p}: ${status}`);
        }
      }
    }
    expect(wrong).toEqual([]);
  }, 60_000);

  it('MCP runs a tool only with the rights of the credential behind it', async () => {
    for (const c of creds) {
      const r = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${c.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'sandboxes_list', arguments: {} } }),
      });
      const text = await r.text();
      // Refused at the door, or the tool answered as an error of rights.
      const ok = refused(r.status, text) || (r.status === 200 && /"isError":true/.test(text) && /CredentialNotAllowed|Unauthorized|credential/.test(text));
      expect(ok, `${c.name}: ${r.status} ${text.slice(0, 200)}`).toBe(true);
    }
  });

  it("libSQL takes the owner key and its database's token only; E2B's control plane the owner key only", async () => {
    const pipeline = { requests: [{ type: 'execute', stmt: { sql: 'SELECT 1' } }, { type: 'close' }] };
    for (const c of creds) {
      const r = await fetch(`${t.baseUrl}/libsql/${dbId}/v2/pipeline`, {
        method: 'POST',
        headers: { authorization: `Bearer ${c.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify(pipeline),
      });
      const text = await r.text();
      if (c.name === 'nube_db_') expect(r.status, text).toBe(200);
      else expect(refused(r.status, text), `${c.name}: ${r.status} ${text}`).toBe(true);
      // E2B's error bodies are E2B's ({code, message}): the status says it.
      const e2b = await fetch(`${t.baseUrl}/e2b/sandboxes`, { headers: { 'x-api-key': c.secret } });
      expect([401, 403], `${c.name}: ${await e2b.text()}`).toContain(e2b.status);
    }
    const owner = await fetch(`${t.baseUrl}/libsql/${dbId}/v2/pipeline`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(pipeline),
    });
    expect(owner.status).toBe(200);
  });
});
