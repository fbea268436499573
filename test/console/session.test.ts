// The console's sign-in and the rules for its session cookie on /api/v2: HttpOnly, SameSite=Strict,
// limited life, stored hashed, revoked by sign-out and with its key, accepted only with the session's
// CSRF token and from nube's own pages.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/platform/crypto.js';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { ensureConsoleBuilt } from './console-build.js';

describe.each(DIALECTS)('console session (%s)', (dialect) => {
  let t: TestNube;
  let origin: string;
  beforeAll(async () => {
    await ensureConsoleBuilt();
    t = await startNube({ dialect });
    origin = t.baseUrl;
  });
  afterAll(() => t?.close());

  const signIn = (key: string, headers: Record<string, string> = { origin }) =>
    fetch(`${t.baseUrl}/console/session`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ key }) });
  const cookieOf = (r: Response) => r.headers.get('set-cookie')!.split(';')[0]!;
  /** The cookie and the CSRF token a sign-in gave, as the console's pages send them. */
  const session = async (key = t.ownerKey) => {
    const r = await signIn(key);
    const { csrfToken } = (await r.json()) as { csrfToken: string };
    return { cookie: cookieOf(r), 'x-nube-csrf': csrfToken };
  };
  const api = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
    fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  it('exchanges a valid key for an HttpOnly SameSite=Strict cookie of limited life, stored hashed, and a CSRF token', async () => {
    const r = await signIn(t.ownerKey);
    expect(r.status).toBe(200);
    const setCookie = r.headers.get('set-cookie')!;
    // Plain HTTP: no Secure, so no __Host- prefix either (test/console/cookie-host.test.ts has HTTPS).
    expect(setCookie).toMatch(/^nube_console=ncs_[A-Za-z0-9]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
    expect(setCookie).not.toMatch(/domain=/i);
    const body = await json(r);
    expect(body.csrfToken).toMatch(/^[0-9a-f]{64}$/);
    expect(setCookie).not.toContain(body.csrfToken);
    const maxAge = Number(/Max-Age=(\d+)/.exec(setCookie)![1]);
    expect(maxAge).toBeGreaterThan(3600);
    expect(maxAge).toBeLessThanOrEqual(12 * 3600);
    expect(setCookie).not.toContain(t.ownerKey);
    const token = cookieOf(r).split('=')[1]!;
    const rows = await t.nube.deps.store.db.selectFrom('console_sessions').selectAll().execute();
    expect(rows.some((x) => x.token_hash === sha256Hex(token))).toBe(true);
    expect(JSON.stringify(rows)).not.toContain(token);
    expect(JSON.stringify(rows)).not.toContain(t.ownerKey);
  });

  it('refuses a wrong key (401), a malformed body (400 with issues) and a sign-in from another site (403)', async () => {
    expect((await signIn('nube_sk_live_notakey0000000000000000000000000')).status).toBe(401);
    const bad = await fetch(`${t.baseUrl}/console/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin }, body: '{"key":5}' });
    expect(bad.status).toBe(400);
    expect((await json(bad)).issues[0].path).toEqual(['body', 'key']);
    const cross = await signIn(t.ownerKey, { origin: 'https://evil.example' });
    expect(cross.status).toBe(403);
    expect(cross.headers.get('set-cookie')).toBeNull();
  });

  it('accepts the cookie on /api/v2 with its CSRF token, and on writes only with this host as Origin', async () => {
    const s = await session();
    const me = await api('GET', '/account', s);
    expect(me.status).toBe(200);
    // A write with no Origin, or another site's, is refused although cookie and token are good.
    const none = await api('POST', '/databases', s, { name: 'csrf-none' });
    expect(none.status).toBe(403);
    expect((await json(none)).code).toBe('CrossSiteRequest');
    const evil = await api('POST', '/databases', { ...s, origin: 'http://evil.example' }, { name: 'csrf-evil' });
    expect(evil.status).toBe(403);
    const sameSite = await api('POST', '/databases', { ...s, 'sec-fetch-site': 'same-site' }, { name: 'csrf-same-site' });
    expect(sameSite.status).toBe(403);
    const list = await json(await api('GET', '/databases', s));
    expect(list.items.map((d: { name: string }) => d.name)).not.toContain('csrf-evil');
    // From the console's own page.
    const ok = await api('POST', '/databases', { ...s, origin }, { name: 'from-console' });
    expect(ok.status).toBe(201);
    const fetchMeta = await api('DELETE', `/databases/${(await json(ok)).id}`, { ...s, 'sec-fetch-site': 'same-origin' });
    expect(fetchMeta.status).toBe(200);
  });

  it('a copied cookie with a forged Origin mints no key, sets no AI key, reads nothing (issue 27 item 3)', async () => {
    // What a tenant's server that received the cookie (a raw port on the console's host, before the fix)
    // could replay: the cookie, and an Origin naming the console. Without the page's token it opens nothing.
    const { cookie } = await session();
    const keysBefore = (await json(await api('GET', '/account/keys', { authorization: `Bearer ${t.ownerKey}` }))).items.length;
    const mint = await api('POST', '/account/keys', { cookie, origin }, { name: 'stolen' });
    expect(mint.status).toBe(401);
    expect((await json(mint)).error).toContain('CSRF token');
    const ai = await api('PUT', '/account/ai-key', { cookie, origin }, { apiKey: 'sk-attacker', baseUrl: 'https://api.openai.com/v1' });
    expect(ai.status).toBe(401);
    expect((await api('GET', '/account', { cookie })).status).toBe(401);
    // Another session's token does not fit this cookie.
    const other = await session();
    expect((await api('POST', '/account/keys', { cookie, origin, 'x-nube-csrf': other['x-nube-csrf'] }, { name: 'mixed' })).status).toBe(401);
    expect((await json(await api('GET', '/account/keys', { authorization: `Bearer ${t.ownerKey}` }))).items.length).toBe(keysBefore);
  });

  it('is not a credential anywhere but /api/v2: MCP ignores it', async () => {
    const s = await session();
    const r = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { ...s, origin, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(r.status).toBe(401);
  });

  it('sign-out revokes the session at once', async () => {
    const s = await session();
    const { cookie } = s;
    expect((await api('GET', '/account', s)).status).toBe(200);
    const crossOut = await fetch(`${t.baseUrl}/console/session`, { method: 'DELETE', headers: { cookie, origin: 'http://evil.example' } });
    expect(crossOut.status).toBe(403);
    const out = await fetch(`${t.baseUrl}/console/session`, { method: 'DELETE', headers: { cookie, origin } });
    expect(out.status).toBe(200);
    expect(await json(out)).toEqual({ ok: true, revoked: true });
    expect(out.headers.get('set-cookie')).toMatch(/^nube_console=; .*Max-Age=0/);
    expect((await api('GET', '/account', s)).status).toBe(401);
  });

  it('ends with the API key it was made from', async () => {
    const created = await json(await api('POST', '/account/keys', { authorization: `Bearer ${t.ownerKey}` }, { name: 'short-lived' }));
    const s = await session(created.secret);
    expect((await api('GET', '/account', s)).status).toBe(200);
    expect((await api('DELETE', `/account/keys/${created.id}`, { authorization: `Bearer ${t.ownerKey}` })).status).toBe(200);
    expect((await api('GET', '/account', s)).status).toBe(401);
  });

  it('expires: a session past its life is refused', async () => {
    const s = await session();
    await t.nube.deps.store.db.updateTable('console_sessions').set({ expires_at: Date.now() - 1 }).execute();
    expect((await api('GET', '/account', s)).status).toBe(401);
  });

  it('serves the built pages compressed, with a strict content security policy', async () => {
    const page = await fetch(`${t.baseUrl}/console/sandboxes`, { headers: { 'accept-encoding': 'br' } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toContain('text/html');
    const csp = page.headers.get('content-security-policy')!;
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    const html = await page.text();
    const script = /src="(\/console\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    expect(html).not.toMatch(/https?:\/\//);
    const js = await fetch(`${t.baseUrl}${script}`, { headers: { 'accept-encoding': 'gzip' } });
    expect(js.status).toBe(200);
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect((await fetch(`${t.baseUrl}/console/assets/nope.js`)).status).toBe(404);
    expect((await fetch(`${t.baseUrl}/console/../package.json`)).status).toBe(404);
  });
});
