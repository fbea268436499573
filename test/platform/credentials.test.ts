// The standing adversarial test of credentials (issue 27): every operation of the registry, and the
// entry points outside it (MCP, an agent's ACP WebSocket, libSQL, E2B's control plane, the registry's
// WebSockets, the LLM gateway's listener, share and payment pages), called with one real credential of
// each kind. What src/platform/credential-reach.ts
// lists for a credential must not be refused for want of rights; everything else must be refused (401,
// or 403 CredentialNotAllowed) before it touches anything. A new route that takes a token by accident
// fails here (and in test/registry.test.ts, which compares the table with the registry).
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { operations } from '../../src/areas/index.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { BASE62, newId, randomToken } from '../../src/platform/ids.js';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { redPng } from '../documents/helpers.js';
import { SANDBOX_ENV, TEST_ROOT } from '../sandboxes/helpers.js';

interface Credential {
  name: string;
  secret: string;
  /** Registry operations it may call (the table's row). */
  allowed: ReadonlySet<string>;
  /** How it is tried on the API: a bearer token, and `?token=` where a holder would put it in a URL. */
  via: readonly ('bearer' | 'query')[];
}

const OPERATOR_KEY = 'operator-key-0123456789abcdef';

const reachOf = (scheme: string) => new Set(CREDENTIAL_REACH.find((c) => c.scheme === scheme)?.operations as string[]);

describe('credentials: each reaches what its holder needs, nothing more', () => {
  let t: TestNube;
  let creds: Credential[];
  let dbId: string;
  let agentId: string;
  let llm: string;
  let share: { token: string; url: string };
  let fileShare: { token: string; url: string };
  let image: string;
  let pay: { token: string; url: string };
  let stub: LlmStub;
  let owner: string;
  let docId: string;
  let notaId: string;
  let linkId: string;
  const dir = `${TEST_ROOT}/credentials-${process.pid}`;

  /** The owner's call to the API. */
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
  const upload = async (fileName: string, contentType: string, data: Buffer) => {
    const created = await call('POST', '/files', { fileName, contentType, size: data.length });
    const put = await fetch(created.putUrl, { method: 'PUT', body: data });
    if (put.status !== 200) throw new Error(`upload of ${fileName} answered ${put.status}`);
    return created.file.id as string;
  };

  beforeAll(async () => {
    stub = await startLlmStub();
    mkdirSync(dir, { recursive: true });
    // The sandbox network for the LLM gateway's listener (on the bridge), an LLM behind it, and nube's own
    // payment page (no hosted provider), confirmed with the operator's key.
    t = await startNube({
      dataDir: dir,
      env: {
        ...SANDBOX_ENV,
        NUBE_RATE_LIMIT_PER_MINUTE: '1000000',
        NUBE_LLM_BASE_URL: stub.url,
        NUBE_LLM_API_KEY: 'sk-operator',
        NUBE_LLM_MODEL: 'op-model',
        NUBE_LLM_GATEWAY_PORT: '0',
        NUBE_CHECKOUT_OPERATOR_KEY: OPERATOR_KEY,
      },
    });
    owner = (await call('GET', '/account')).id as string;
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
    // A document showing one image, and a file of its own, each shared.
    image = await upload('rojo.png', 'image/png', await redPng());
    const doc = await call('POST', '/documents', { name: 'd', sections: [{ heading: 'Compartido', body: 'x', images: [{ fileId: image }] }] });
    docId = doc.document.id;
    share = await call('POST', '/share-tokens', { documentId: docId });
    notaId = await upload('nota.txt', 'text/plain', Buffer.from('solo esto'));
    fileShare = await call('POST', '/share-tokens', { fileId: notaId });
    const link = await call('POST', '/payment-links', { amountCentavos: 25_000, description: 'Consulta', metadata: { secret: 'owner-only' } });
    linkId = link.id;
    pay = { url: link.url, token: new URL(link.url).pathname.split('/')[2]! };
    const db = await call('POST', '/databases', { name: 'reach' });
    dbId = db.id;
    const dbToken = await call('POST', `/databases/${db.id}/tokens`, {});
    llm = await t.nube.services.llm.issueCredential(owner, 'test:reach', null);
    creds = [
      { name: 'agt_', secret: embed, allowed: reachOf('agent'), via: ['bearer'] },
      { name: 'flt_tk_', secret: fleet.token, allowed: reachOf('fleetAgent'), via: ['bearer'] },
      { name: 'flt_pk_', secret: pk.key, allowed: reachOf('fleetPublic'), via: ['bearer'] },
      { name: 'nube_cc_', secret: client.credential, allowed: reachOf('client'), via: ['bearer'] },
      // A share token is handed out as `?token=` (the PDF export); a bearer reaches the same, no more.
      { name: 'shr_', secret: share.token, allowed: reachOf('share'), via: ['query', 'bearer'] },
      // The same scheme: the PDF export refuses it for want of its document (below).
      { name: 'shr_ (file)', secret: fileShare.token, allowed: reachOf('share'), via: ['query'] },
      { name: 'nube_db_', secret: dbToken.token, allowed: reachOf('database'), via: ['bearer'] },
      { name: 'nube_llm_', secret: llm, allowed: new Set(), via: ['bearer'] },
      { name: 'payment link', secret: pay.token, allowed: new Set(CREDENTIAL_REACH.find((c) => c.credential.startsWith('Payment link'))!.operations as string[]), via: ['query', 'bearer'] },
    ];
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await stub?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const fill = (path: string) => path.replace(/\{[A-Za-z0-9_]+\}/g, (m) => (m === '{dbId}' ? dbId : m === '{id}' ? agentId : 'x0'));
  /** Refused for want of rights: 401, or 403 CredentialNotAllowed (nothing ran). */
  const refused = (status: number, body: string) => status === 401 || (status === 403 && body.includes('CredentialNotAllowed'));

  it('every registry operation: the table\'s operations only', async () => {
    const wrong: string[] = [];
    for (const c of creds) {
      for (const how of c.via) {
        // Where a credential goes in the request changes nothing of what it reaches.
        const allowed = (id: string) => c.allowed.has(id);
        for (const op of operations.filter((o) => !o.websocket)) {
          const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
          const url = `${t.baseUrl}/api/v2${fill(op.path)}${how === 'query' ? `?token=${c.secret}` : ''}`;
          const r = await fetch(url, {
            method: op.method,
            headers: { ...(how === 'query' ? {} : { authorization: `Bearer ${c.secret}` }), ...(body ? { 'content-type': 'application/json' } : {}) },
            body,
          });
          const text = await r.text();
          const isRefused = refused(r.status, text);
          if (allowed(op.id) === isRefused) wrong.push(`${c.name} ${how} ${op.id} ${op.method} ${op.path}: ${r.status} ${text.slice(0, 120)}`);
        }
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
      const r = await fetch(`${t.baseUrl}/api/mcp${c.via.includes('query') ? `?token=${c.secret}` : ''}`, {
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
      const r = await fetch(`${t.baseUrl}/libsql/${dbId}/v2/pipeline${c.via.includes('query') ? `?token=${c.secret}` : ''}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${c.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify(pipeline),
      });
      const text = await r.text();
      if (c.name === 'nube_db_') expect(r.status, text).toBe(200);
      else expect(refused(r.status, text), `${c.name}: ${r.status} ${text}`).toBe(true);
      // E2B's error bodies are E2B's ({code, message}): the status says it.
      const e2b = await fetch(`${t.baseUrl}/e2b/sandboxes?token=${c.secret}`, { headers: { 'x-api-key': c.secret } });
      expect([401, 403], `${c.name}: ${await e2b.text()}`).toContain(e2b.status);
    }
    const owner = await fetch(`${t.baseUrl}/libsql/${dbId}/v2/pipeline`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(pipeline),
    });
    expect(owner.status).toBe(200);
  });
  it('a share token opens its one file, or its document page and the images that page shows, and nothing else', async () => {
    const page = await fetch(share.url);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('Compartido');
    expect(html).toContain(`/share/${share.token}/assets/${image}`);
    expect((await fetch(share.url, { method: 'HEAD' })).status).toBe(200);
    const img = await fetch(`${share.url}/assets/${image}`);
    expect([img.status, img.headers.get('content-type')]).toEqual([200, 'image/png']);
    const file = await fetch(fileShare.url);
    expect([file.status, await file.text()]).toEqual([200, 'solo esto']);
    // Another file of the owner through the document's assets; the file token's assets; the PDF of a
    // document with the file's token: nothing.
    expect((await fetch(`${share.url}/assets/${notaId}`)).status).toBe(404);
    expect((await fetch(`${fileShare.url}/assets/${image}`)).status).toBe(404);
    const pdf = await fetch(`${t.baseUrl}/api/v2/documents/${docId}/pdf?token=${fileShare.token}`);
    expect([pdf.status, (await json(pdf)).code]).toEqual([403, 'ShareTokenNotForThis']);
    // No other method or path under the link.
    for (const [method, path] of [['POST', ''], ['PUT', ''], ['DELETE', ''], ['GET', '/pdf'], ['GET', '/assets'], ['POST', `/assets/${image}`]] as const) {
      expect((await fetch(`${share.url}${path}`, { method })).status, `${method} ${path}`).toBe(404);
    }
    // Every other credential where a share token goes: not a link (403), the owner's key included.
    for (const secret of [t.ownerKey, pay.token, ...creds.filter((c) => !c.name.startsWith('shr_')).map((c) => c.secret)]) {
      expect((await fetch(`${t.baseUrl}/share/${encodeURIComponent(secret)}`)).status).toBe(403);
    }
    // A share token on the payment pages: no link there.
    expect((await fetch(`${t.baseUrl}/pay/${share.token}`)).status).toBe(404);
    // Revoked, it opens nothing at once.
    const gone = await call('POST', '/share-tokens', { fileId: notaId });
    expect((await fetch(gone.url)).status).toBe(200);
    await fetch(`${t.baseUrl}/api/v2/share-tokens/${gone.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${t.ownerKey}` } });
    expect((await fetch(gone.url)).status).toBe(403);
  });

  it('a payment link opens its page, its thanks page and its checkout; confirming also takes the operator key', async () => {
    const page = await fetch(pay.url);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('Consulta');
    expect(html).toContain('$250.00 MXN');
    // The amount and the description only: not the link's id, metadata or owner.
    for (const hidden of ['owner-only', linkId, owner]) expect(html).not.toContain(hidden);
    expect((await fetch(`${pay.url}/thanks`)).status).toBe(200);
    // No hosted provider here: the checkout says so (409) and starts nothing.
    expect((await fetch(`${pay.url}/checkout`, { method: 'POST', redirect: 'manual' })).status).toBe(409);
    const confirm = (operatorKey?: string) =>
      fetch(`${pay.url}/confirm`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: operatorKey === undefined ? '' : new URLSearchParams({ operatorKey }).toString(),
      });
    for (const key of [undefined, t.ownerKey, pay.token, 'x'.repeat(OPERATOR_KEY.length)]) expect((await confirm(key)).status).toBe(403);
    expect((await call('GET', `/payment-links/${linkId}`)).paymentsCount).toBe(0);
    // Nothing else under the link.
    for (const [method, path] of [['PUT', ''], ['DELETE', ''], ['POST', ''], ['GET', '/checkout'], ['GET', '/confirm'], ['GET', '/payments']] as const) {
      expect((await fetch(`${pay.url}${path}`, { method })).status, `${method} ${path}`).toBe(404);
    }
    // Every other credential where a payment link goes: no link.
    for (const secret of [t.ownerKey, ...creds.filter((c) => c.name !== 'payment link').map((c) => c.secret)]) {
      expect((await fetch(`${t.baseUrl}/pay/${encodeURIComponent(secret)}`)).status).toBe(404);
      expect((await fetch(`${t.baseUrl}/pay/${encodeURIComponent(secret)}/checkout`, { method: 'POST', redirect: 'manual' })).status).toBe(404);
    }
    // With the operator's key, the payment is recorded, once.
    expect((await confirm(OPERATOR_KEY)).status).toBe(200);
    expect((await call('GET', `/payment-links/${linkId}`)).paymentsCount).toBe(1);
    expect((await confirm(OPERATOR_KEY)).status).toBe(409);
  });

  it("nube_llm_ opens the gateway's two routes on its listener; every other path there is 404", async () => {
    const origin = (await t.nube.services.llm.gatewayUrl()).replace(/\/v1$/, '');
    const as = (secret: string, json = false) => ({ authorization: `Bearer ${secret}`, ...(json ? { 'content-type': 'application/json' } : {}) });
    const chatBody = JSON.stringify({ messages: [{ role: 'user', content: 'hola' }] });
    const models = await fetch(`${origin}/v1/models`, { headers: as(llm) });
    expect(models.status).toBe(200);
    expect((await json(models)).data[0].id).toBe('op-model');
    const chat = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: as(llm, true), body: chatBody });
    expect(chat.status).toBe(200);
    expect((await json(chat)).choices[0].message.content).toBe('echo: hola');
    // Everything else on the listener: the API's operations, nube's other entry points, other OpenAI routes.
    const others: [string, string][] = [
      ...operations.filter((o) => !o.websocket).map((o): [string, string] => [o.method, `/api/v2${fill(o.path)}`]),
      ['POST', '/api/mcp'],
      ['GET', '/e2b/sandboxes'],
      ['POST', `/libsql/${dbId}/v2/pipeline`],
      ['GET', new URL(share.url).pathname],
      ['GET', `/pay/${pay.token}`],
      ['GET', '/'],
      ['GET', '/healthz'],
      ['GET', '/v1'],
      ['GET', '/v1/'],
      ['POST', '/v1/completions'],
      ['POST', '/v1/embeddings'],
      ['POST', '/v1/responses'],
      ['GET', '/v1/chat/completions'],
      ['PUT', '/v1/chat/completions'],
      ['POST', '/v1/chat/completions/'],
      ['POST', '/v1/models'],
      ['DELETE', '/v1/models'],
      ['GET', '/v1/models/op-model'],
    ];
    const wrong: string[] = [];
    for (const [method, path] of others) {
      const body = method === 'GET' || method === 'DELETE' ? undefined : chatBody;
      const r = await fetch(`${origin}${path}`, { method, headers: as(llm, !!body), body });
      if (r.status !== 404) wrong.push(`${method} ${path}: ${r.status}`);
    }
    expect(wrong).toEqual([]);
    const upgrade = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${origin.replace(/^http/, 'ws')}/v1/chat/completions`, { headers: as(llm) });
      ws.once('open', () => {
        ws.close();
        resolve(101);
      });
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.once('error', () => resolve(0));
    });
    expect(upgrade).not.toBe(101);
    // Its two routes take no other credential, the owner's key included.
    for (const secret of [t.ownerKey, pay.token, ...creds.filter((c) => c.name !== 'nube_llm_').map((c) => c.secret)]) {
      expect((await fetch(`${origin}/v1/models`, { headers: as(secret) })).status).toBe(401);
      expect((await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: as(secret, true), body: chatBody })).status).toBe(401);
    }
    // One made for a sandbox's address, from anywhere else (here the host): refused.
    const bound = await t.nube.services.llm.issueCredential(owner, 'test:bound', '10.78.0.250');
    expect((await fetch(`${origin}/v1/models`, { headers: as(bound) })).status).toBe(401);
  });
});
