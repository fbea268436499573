// Issue 32 item 4: the audit log. Every mutating call (REST and MCP) and every refused credential is
// recorded with who, what, the answer and from where; read back with filters, pages and NDJSON; a hash
// chain per account catches an edited or removed entry; retention drops old entries and the rest verifies.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuditWriter, auditKey } from '../../src/areas/audit/chain.js';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

describe.each(DIALECTS)('audit log (%s)', (dialect) => {
  let t: TestNube;
  let keyId = '';
  let dbId = '';
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> =>
    callJson(t.baseUrl, method, path, body, { ...t.auth, ...headers });
  const audit = async (query: string) => {
    const r = await call('GET', `/account/audit${query}`);
    expect(r.status).toBe(200);
    return r.body as { items: Record<string, unknown>[]; nextCursor: string | null; hasMore: boolean };
  };
  const db = () => t.nube.deps.store.db;

  beforeAll(async () => {
    t = await startNube({ dialect });
    const keys = await call('GET', '/account/keys');
    keyId = keys.body.items[0].id;
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it('records a create, a write and a delete with who, what, the answer and from where; not a read', async () => {
    const made = await call('POST', '/databases', { name: `audit${Date.now().toString(36)}` }, { 'user-agent': 'audit-test/1', 'x-request-id': 'req-audit-1' });
    expect(made.status).toBe(201);
    dbId = made.body.id;
    expect((await call('POST', `/databases/${dbId}/query`, { sql: 'CREATE TABLE t (x)' })).status).toBe(200);
    expect((await call('POST', `/databases/${dbId}/query`, { sql: 'INSERT INTO t VALUES (1)' })).status).toBe(200);
    expect((await call('GET', `/databases/${dbId}`)).status).toBe(200);

    const page = await audit(`?resourceId=${dbId}`);
    expect(page.items.map((e) => e.operation)).toEqual(['databases.query', 'databases.query', 'databases.create']);
    const created = page.items[2]!;
    expect(created).toMatchObject({
      accountId: expect.stringMatching(/^acct_/),
      workspaceId: 'default',
      keyId,
      keyName: expect.any(String),
      credential: 'owner',
      method: 'POST',
      resourceId: dbId,
      status: 201,
      errorCode: null,
      sourceIp: '127.0.0.1',
      userAgent: 'audit-test/1',
      requestId: 'req-audit-1',
      via: 'rest',
    });
    // Never the secret, in any field.
    expect(JSON.stringify(page)).not.toContain(t.ownerKey);
  });

  it('records a refused call with its status and error code', async () => {
    const bad = await call('POST', '/databases', { name: 5 });
    expect(bad.status).toBe(400);
    const missing = await call('DELETE', '/databases/db_nothing_here');
    expect(missing.status).toBe(404);
    const items = (await audit('?operation=databases.create')).items;
    expect(items[0]).toMatchObject({ status: 400, errorCode: expect.any(String), resourceId: null });
    expect((await audit('?resourceId=db_nothing_here')).items[0]).toMatchObject({ operation: 'databases.delete', status: 404 });
  });

  it('records refused credentials: an unknown key (no account) and a credential of the wrong kind (its account)', async () => {
    const unknown = await callJson(t.baseUrl, 'GET', '/sandboxes', undefined, { authorization: 'Bearer nube_sk_live_notarealkeynotarealkeynotarealkey' });
    expect(unknown.status).toBe(401);
    const anon = await db().selectFrom('audit_entries').selectAll().where('owner_id', '=', '').where('request_id', '=', unknown.headers.get('x-request-id')!).execute();
    expect(anon).toMatchObject([{ operation: 'sandboxes.list', status: 401, method: 'GET', key_id: null }]);
    expect(JSON.stringify(anon)).not.toContain('notarealkey');

    const tok = await call('POST', `/databases/${dbId}/tokens`, { name: 'app' });
    expect(tok.status).toBe(201);
    const wrongKind = await callJson(t.baseUrl, 'GET', '/sandboxes', undefined, { authorization: `Bearer ${tok.body.token}` });
    expect(wrongKind.status).toBe(403);
    const e = (await audit('?operation=sandboxes.list')).items[0];
    expect(e).toMatchObject({ status: 403, errorCode: 'CredentialNotAllowed', credential: 'database', keyId: tok.body.id, keyName: null });

    const mcp = await fetch(`${t.baseUrl}/api/mcp`, { method: 'POST', headers: { authorization: 'Bearer nube_sk_live_nopenopenopenopenopenopenope' } });
    expect(mcp.status).toBe(401);
    const mcpRows = await db().selectFrom('audit_entries').select(['operation', 'status']).where('request_id', '=', mcp.headers.get('x-request-id')!).execute();
    expect(mcpRows).toEqual([{ operation: 'mcp', status: 401 }]);
  });

  it('records MCP tool calls with the MCP caller', async () => {
    const r = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'user-agent': 'mcp-agent/2', 'x-request-id': 'req-mcp-1' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'databases_query', arguments: { dbId, body: { sql: 'INSERT INTO t VALUES (2)' } } } }),
    });
    const out = (await r.json()) as { result: { isError?: boolean; content: unknown } };
    expect(out.result.isError, JSON.stringify(out.result.content)).toBeFalsy();
    const e = (await audit(`?resourceId=${dbId}&operation=databases.query`)).items[0];
    expect(e).toMatchObject({ via: 'mcp', userAgent: 'mcp-agent/2', requestId: 'req-mcp-1', sourceIp: '127.0.0.1', status: 200, keyId });
  });

  it('filters by key, time and operation, pages with a cursor, and exports NDJSON', async () => {
    const all = await audit('?limit=200');
    expect(all.items.length).toBeGreaterThan(5);
    expect((await audit(`?keyId=${keyId}&limit=200`)).items.every((e) => e.keyId === keyId)).toBe(true);
    expect((await audit('?keyId=key_nobody')).items).toEqual([]);
    const future = new Date(Date.now() + 60_000).toISOString();
    expect((await audit(`?since=${future}`)).items).toEqual([]);
    expect((await audit(`?until=${future}&limit=200`)).items.length).toBe(all.items.length);
    const bad = await call('GET', '/account/audit?since=yesterday&limit=0');
    expect(bad.status).toBe(400);
    expect(bad.body.issues.map((i: { path: string[] }) => i.path.at(-1)).sort()).toEqual(['limit', 'since']);
    expect((await call('GET', '/account/audit?cursor=nope')).status).toBe(400);

    const ids: unknown[] = [];
    let cursor: string | null = null;
    do {
      const p = await audit(`?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      ids.push(...p.items.map((e) => e.id));
      cursor = p.nextCursor;
    } while (cursor);
    // Entries written while paging (the reads are not audited) would show; none are.
    expect(ids).toEqual(all.items.map((e) => e.id));

    for (const how of [{ q: '?format=ndjson', h: {} as Record<string, string> }, { q: '', h: { accept: 'application/x-ndjson' } }]) {
      const r = await fetch(`${t.baseUrl}/api/v2/account/audit${how.q}`, { headers: { ...t.auth, ...how.h } });
      expect(r.headers.get('content-type')).toContain('application/x-ndjson');
      const lines = (await r.text()).trim().split('\n').map((l) => JSON.parse(l) as { id: string });
      expect(lines.map((l) => l.id)).toEqual(all.items.map((e) => e.id));
    }
  });

  it('verifies the chain, and names the first edited or removed entry', async () => {
    const ok = await t.nube.services.audit.verify();
    expect(ok.problems).toEqual([]);
    expect(ok.entries).toBeGreaterThan(5);

    const own = await db().selectFrom('audit_entries').selectAll().where('owner_id', '!=', '').orderBy('seq').execute();
    const owner = own[0]!.owner_id;
    const [, second, third] = own;
    // Edited: the status of the second entry.
    await db().updateTable('audit_entries').set({ status: 299 }).where('id', '=', second!.id).execute();
    expect((await t.nube.services.audit.verify(owner)).problems).toEqual([
      { accountId: owner, entryId: second!.id, seq: Number(second!.seq), reason: expect.stringContaining('edited') },
    ]);
    await db().updateTable('audit_entries').set({ status: second!.status }).where('id', '=', second!.id).execute();
    expect((await t.nube.services.audit.verify(owner)).problems).toEqual([]);
    // Removed: the second entry; the third is named.
    await db().deleteFrom('audit_entries').where('id', '=', second!.id).execute();
    expect((await t.nube.services.audit.verify(owner)).problems).toEqual([
      { accountId: owner, entryId: third!.id, seq: Number(third!.seq), reason: expect.stringContaining('removed') },
    ]);
    await db().insertInto('audit_entries').values(second!).execute();
    // Removed: the newest.
    const newest = own.at(-1)!;
    await db().deleteFrom('audit_entries').where('id', '=', newest.id).execute();
    expect((await t.nube.services.audit.verify(owner)).problems).toMatchObject([{ accountId: owner, entryId: null, reason: expect.stringContaining('newest') }]);
    await db().insertInto('audit_entries').values(newest).execute();
    expect((await t.nube.services.audit.verify()).problems).toEqual([]);
  });

  it('keeps entries as long as the plan says, then the rest still verifies', async () => {
    const own = await db().selectFrom('audit_entries').selectAll().where('owner_id', '!=', '').orderBy('seq').execute();
    const owner = own[0]!.owner_id;
    // The owner is on Tera (365 days): entries 8 days old stay (Byte would drop them), 400 days old go.
    const back = async (days: number) => {
      for (const e of own.slice(0, 3)) await db().updateTable('audit_entries').set({ created_at: Date.now() - days * 24 * 3600 * 1000 }).where('id', '=', e.id).execute();
    };
    await back(8);
    expect(await t.nube.services.audit.prune()).toBe(0);
    await back(400);
    expect(await t.nube.services.audit.prune()).toBe(3);
    const left = await db().selectFrom('audit_entries').select('id').where('owner_id', '=', owner).execute();
    expect(left.length).toBe(own.length - 3);
    // Those entries are gone with the hashes that covered them; the anchor carries the chain on.
    expect((await t.nube.services.audit.verify(owner)).problems).toEqual([]);
    // Removing the oldest entry left is still caught.
    const oldest = own[3]!;
    await db().deleteFrom('audit_entries').where('id', '=', oldest.id).execute();
    expect((await t.nube.services.audit.verify(owner)).problems).toMatchObject([{ entryId: own[4]!.id, reason: expect.stringContaining('removed') }]);
    await db().insertInto('audit_entries').values(oldest).execute();
  });
  it('two writers on one chain (replicas) interleave without a gap or a fork', async () => {
    const key = auditKey(t.nube.deps.config.secret);
    const { db: kdb, dialect: d } = t.nube.deps.store;
    const writers = [new AuditWriter(kdb, d, key), new AuditWriter(kdb, d, key)];
    const entry = (i: number) => ({
      id: `aud_${Date.now().toString(36).padStart(9, '0')}${String(i).padStart(12, '0')}`,
      owner_id: 'acct_replicas',
      created_at: Date.now(),
      workspace_id: null,
      key_id: null,
      key_name: null,
      scheme: null,
      operation: 'x.y',
      method: 'POST',
      resource_id: null,
      status: 200,
      error_code: null,
      source_ip: null,
      user_agent: null,
      request_id: `r${i}`,
      via: 'rest',
    });
    for (let i = 0; i < 10; i++) await writers[i % 2]!.append(entry(i));
    await Promise.all(Array.from({ length: 10 }, (_, i) => writers[i % 2]!.append(entry(10 + i))));
    const r = await t.nube.services.audit.verify('acct_replicas');
    expect(r).toMatchObject({ accounts: 1, entries: 20, problems: [] });
  });
});
