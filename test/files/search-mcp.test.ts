import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json } from '../helpers/server.js';
import { type FilesNube, startEmbeddingsServer, startFilesNube, upload } from './helpers.js';

describe('files search with an OpenAI-compatible embeddings server', () => {
  let t: FilesNube;
  let ai: Awaited<ReturnType<typeof startEmbeddingsServer>>;
  beforeAll(async () => {
    ai = await startEmbeddingsServer();
    t = await startFilesNube(
      { dialect: 'sqlite', backend: 'local' },
      { NUBE_FILES_AI_BASE_URL: ai.baseUrl, NUBE_FILES_AI_KEY: 'sk-test-embeddings', NUBE_FILES_AI_MODEL: 'bow' },
    );
  });
  afterAll(async () => {
    await t?.close();
    ai?.server.close();
  });

  it('finds files by meaning, embeds them in a durable job, and re-embeds after an update', async () => {
    const invoice = await upload(t, 'invoice-march.pdf', Buffer.from('%PDF'), { contentType: 'application/pdf' });
    await upload(t, 'holiday-beach.jpg', Buffer.from('jpg'), { contentType: 'image/jpeg', metadata: { trip: 'summer vacation' } });
    await upload(t, 'notes.txt', Buffer.from('n'), { metadata: { topic: 'meeting minutes' } });
    // The embed jobs run on the server's queue; after them every file has a vector.
    const embedded = async () => {
      const rows = await t.nube.deps.store.db.selectFrom('files').select('embedding').where('owner_id', '=', t.ownerId).execute();
      return rows.every((r) => r.embedding !== null);
    };
    for (let i = 0; i < 400 && !(await embedded()); i++) await new Promise((r) => setTimeout(r, 50));
    expect(await embedded()).toBe(true);
    expect(ai.keys.every((k) => k === 'Bearer sk-test-embeddings')).toBe(true);

    const r = await t.api('/files/search?q=invoice');
    expect(r.status).toBe(200);
    const { items } = await json(r);
    expect(items[0].id).toBe(invoice.id);
    expect(items.length).toBeLessThanOrEqual(20);
    const vacation = await json(await t.api('/files/search?q=summer%20vacation%20photos&limit=1'));
    expect(vacation.items.map((f: { name: string }) => f.name)).toEqual(['holiday-beach.jpg']);

    // Search embeds only the query when every vector is current.
    const before = ai.requests.length;
    await t.api('/files/search?q=minutes');
    expect(ai.requests.slice(before)).toEqual([['minutes']]);

    await t.api(`/files/${invoice.id}`, { method: 'PATCH', body: JSON.stringify({ name: 'receipt-april.pdf' }) });
    const receipt = await json(await t.api('/files/search?q=receipt&limit=1'));
    expect(receipt.items[0].id).toBe(invoice.id);
    expect((await t.api('/files/search')).status).toBe(400);
  });

  it('exposes files.get as the MCP tool files_get', async () => {
    const f = await upload(t, 'mcp.txt', Buffer.from('via mcp'));
    const client = new Client({ name: 'nube-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${t.ownerKey}` } } }),
    );
    try {
      const r = await client.callTool({ name: 'files_get', arguments: { fileId: f.id } });
      expect(r.isError).toBe(false);
      const got = r.structuredContent as { id: string; readUrl: string };
      expect(got.id).toBe(f.id);
      expect(await (await fetch(got.readUrl)).text()).toBe('via mcp');
      const missing = await client.callTool({ name: 'files_get', arguments: { fileId: 'file_nope' } });
      expect(missing.isError).toBe(true);
    } finally {
      await client.close();
    }
  });
});

describe('files search without an AI key', () => {
  let t: FilesNube;
  beforeAll(async () => {
    t = await startFilesNube({ dialect: 'sqlite', backend: 'local' });
  });
  afterAll(() => t?.close());

  it('answers 400 AiKeyNotConfigured', async () => {
    const r = await t.api('/files/search?q=anything');
    expect(r.status).toBe(400);
    expect((await json(r)).code).toBe('AiKeyNotConfigured');
  });

  it("refuses an AI key whose endpoint is loopback (no allow-list on this server)", async () => {
    const r = await t.api('/account/ai-key', { method: 'PUT', body: JSON.stringify({ apiKey: 'sk-x', baseUrl: 'http://127.0.0.1:9/v1' }) });
    expect(r.status).toBe(400);
    expect((await json(r)).code).toBe('UrlRefused');
    expect((await json(await t.api('/account/ai-key'))).configured).toBe(false);
  });
});

describe("files search with the caller's own AI key", () => {
  let t: FilesNube;
  let ai: Awaited<ReturnType<typeof startEmbeddingsServer>>;
  beforeAll(async () => {
    ai = await startEmbeddingsServer();
    // No operator key: only the account's own key can serve search. Loopback is allowed for the test server.
    t = await startFilesNube({ dialect: 'sqlite', backend: 'local' }, { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' });
  });
  afterAll(async () => {
    await t?.close();
    ai?.server.close();
  });

  it('is set with PUT /account/ai-key, used for search, never shown, and removable', async () => {
    const doc = await upload(t, 'contract-signed.pdf', Buffer.from('%PDF'), { contentType: 'application/pdf' });
    await upload(t, 'cat.jpg', Buffer.from('jpg'), { contentType: 'image/jpeg' });
    expect((await t.api('/files/search?q=contract')).status).toBe(400);

    const set = await t.api('/account/ai-key', {
      method: 'PUT',
      body: JSON.stringify({ apiKey: 'sk-owner-own-key-123', baseUrl: ai.baseUrl, model: 'bow' }),
    });
    expect(set.status).toBe(200);
    const view = await json(set);
    expect(view).toMatchObject({ configured: true, baseUrl: ai.baseUrl, model: 'bow' });
    expect(JSON.stringify(view)).not.toContain('sk-owner-own-key-123');
    const stored = await t.nube.deps.store.db.selectFrom('account_ai_keys').selectAll().execute();
    expect(JSON.stringify(stored)).not.toContain('sk-owner-own-key-123');

    const r = await json(await t.api('/files/search?q=contract&limit=1'));
    expect(r.items.map((f: { id: string }) => f.id)).toEqual([doc.id]);
    expect(ai.keys.length).toBeGreaterThan(0);
    expect(ai.keys.every((k) => k === 'Bearer sk-owner-own-key-123')).toBe(true);

    expect((await t.api('/account/ai-key', { method: 'DELETE' })).status).toBe(200);
    expect((await json(await t.api('/account/ai-key'))).configured).toBe(false);
    expect((await t.api('/files/search?q=contract')).status).toBe(400);
  });
});
