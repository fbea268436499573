// The standing test of what the console's session cookie reaches (issue 27; its row in
// src/platform/credential-reach.ts): with the session's CSRF token, from a page of this host, every
// operation that takes owner credentials and nothing else (not MCP, libSQL, E2B or an agent's ACP
// socket). The cookie alone, which a browser sends to every port of its host and a program can copy,
// reaches nothing at all; a state-changing call also needs an Origin of this host. Every operation of
// the registry is called, so a new route cannot take the cookie alone by accident.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { operations } from '../../src/areas/index.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { startNube, type TestNube } from '../helpers/server.js';

describe('console cookie: what it reaches', () => {
  let t: TestNube;
  let cookie: string;
  let csrf: string;
  let dbId: string;
  let origin: string;

  beforeAll(async () => {
    t = await startNube({ env: { NUBE_RATE_LIMIT_PER_MINUTE: '1000000' } });
    origin = t.baseUrl;
    const r = await fetch(`${t.baseUrl}/console/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin },
      body: JSON.stringify({ key: t.ownerKey }),
    });
    cookie = r.headers.get('set-cookie')!.split(';')[0]!;
    csrf = ((await r.json()) as { csrfToken: string }).csrfToken;
    const db = await fetch(`${t.baseUrl}/api/v2/databases`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'reach' }),
    });
    dbId = ((await db.json()) as { id: string }).id;
  }, 60_000);
  afterAll(() => t?.close());

  const row = CREDENTIAL_REACH.find((c) => c.credential.startsWith('Console session cookie'))!;
  const ownerOps = operations.filter((o) => !o.websocket && o.auth.includes('owner'));
  const otherOps = operations.filter((o) => !o.websocket && !o.auth.includes('owner'));
  const fill = (path: string) => path.replace(/\{[A-Za-z0-9_]+\}/g, (m) => (m === '{dbId}' ? dbId : 'x0'));
  const stateChanging = (m: string) => m !== 'GET';

  /** Status and the start of the body; an event stream is cut once its status is known. */
  async function call(method: string, path: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
    const body = method === 'GET' || method === 'DELETE' ? undefined : '{}';
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 15_000);
    try {
      const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
        method,
        headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
        body,
        signal: ac.signal,
      });
      if (r.headers.get('content-type')?.includes('text/event-stream')) {
        ac.abort();
        return { status: r.status, text: '' };
      }
      return { status: r.status, text: (await r.text()).slice(0, 160) };
    } finally {
      clearTimeout(timer);
    }
  }

  it('the table says: every operation that takes owner credentials, never a tenant host, never a credential change without its token', () => {
    expect(row.operations).toBe('*');
    expect(row.never).toMatch(/raw ports/);
  });

  it('the cookie alone (even with an Origin of this host) reaches no operation: 401 everywhere', async () => {
    const wrong: string[] = [];
    for (const op of [...ownerOps, ...otherOps]) {
      const r = await call(op.method, fill(op.path), { cookie, origin });
      if (r.status !== 401) wrong.push(`${op.id} ${op.method} ${op.path}: ${r.status} ${r.text}`);
    }
    expect(wrong).toEqual([]);
  }, 300_000);

  it('with its token but no Origin of this host, every state-changing operation is refused before it runs', async () => {
    const wrong: string[] = [];
    for (const op of ownerOps.filter((o) => stateChanging(o.method))) {
      for (const o of [undefined, 'http://evil.example']) {
        const r = await call(op.method, fill(op.path), { cookie, 'x-nube-csrf': csrf, ...(o ? { origin: o } : {}) });
        if (r.status !== 403 || !r.text.includes('CrossSiteRequest')) wrong.push(`${op.id} origin=${o}: ${r.status} ${r.text}`);
      }
    }
    expect(wrong).toEqual([]);
  }, 300_000);

  it('with its token, every read that takes owner credentials is open to it, and operations of other credentials are not', async () => {
    const wrong: string[] = [];
    const refusedForRights = (s: number, text: string) => s === 401 || (s === 403 && /CredentialNotAllowed|CrossSiteRequest/.test(text));
    for (const op of [...ownerOps, ...otherOps].filter((o) => !stateChanging(o.method))) {
      const r = await call(op.method, fill(op.path), { cookie, 'x-nube-csrf': csrf });
      const allowed = op.auth.includes('owner');
      if (allowed === refusedForRights(r.status, r.text)) wrong.push(`${op.id} ${op.path}: ${r.status} ${r.text}`);
    }
    expect(wrong).toEqual([]);
    // And a write from the console's own page runs (the writes above were refused before running).
    const made = await fetch(`${t.baseUrl}/api/v2/databases`, {
      method: 'POST',
      headers: { cookie, 'x-nube-csrf': csrf, origin, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'from-the-console' }),
    });
    expect(made.status).toBe(201);
  }, 300_000);

  it("is no credential outside /api/v2: MCP, libSQL, E2B, an agent's ACP socket", async () => {
    const h = { cookie, 'x-nube-csrf': csrf, origin };
    const mcp = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(mcp.status).toBe(401);
    const libsql = await fetch(`${t.baseUrl}/libsql/${dbId}/v2/pipeline`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'application/json' },
      body: JSON.stringify({ requests: [{ type: 'execute', stmt: { sql: 'SELECT 1' } }, { type: 'close' }] }),
    });
    expect(libsql.status).toBe(401);
    expect([401, 403]).toContain((await fetch(`${t.baseUrl}/e2b/sandboxes`, { headers: h })).status);
    expect([401, 403]).toContain(await upgrade(`/api/v2/agents/agt_x0/acp`, h, [`nube-csrf.${csrf}`]));
  });

  it("the registry's WebSockets: its token as a subprotocol and an Origin of this host, or nothing", async () => {
    for (const op of operations.filter((o) => o.websocket)) {
      const path = `/api/v2${fill(op.path)}`;
      expect(await upgrade(path, { cookie, origin }, []), `${op.id}: cookie alone`).toBe(401);
      expect(await upgrade(path, { cookie, origin }, ['nube-csrf.forged']), `${op.id}: wrong token`).toBe(401);
      expect(await upgrade(path, { cookie, origin: 'http://evil.example' }, [`nube-csrf.${csrf}`]), `${op.id}: cross-site`).toBe(403);
      // Admitted: the unknown sandbox answers 404 (a real one opens: test/console/terminal.test.ts).
      expect(await upgrade(path, { cookie, origin }, [`nube-csrf.${csrf}`]), `${op.id}: from the console`).toBe(404);
    }
  });

  function upgrade(path: string, headers: Record<string, string>, protocols: string[]): Promise<number> {
    return new Promise((resolve) => {
      const ws = new WebSocket(`${t.baseUrl.replace(/^http/, 'ws')}${path}`, protocols, { headers });
      ws.once('open', () => {
        ws.close();
        resolve(101);
      });
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.once('error', () => resolve(0));
    });
  }
});
