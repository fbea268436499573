// Where the console's cookie may be set and sent (issue 27 item 3): a browser sends a host's cookies to
// every port of that host, so the console signs in only at a host no tenant's server shares. Raw ports
// get an address and a host name of their own by default (and NUBE_RAW_HOST naming the console's host
// is refused); over plain HTTP the console does not sign in where raw ports listen on the same address;
// over HTTPS (nube's own listener, or a proxy the operator trusts with NUBE_TRUST_PROXY) the cookie is
// `__Host-nube_console` with Secure, and HSTS keeps the browser off plain HTTP on every port of the host.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { makeCert } from '../domains/pebble.js';
import { freePort } from '../helpers/process.js';
import { startNube, type TestNube } from '../helpers/server.js';

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  // biome-ignore lint/suspicious/noExplicitAny: test reads arbitrary JSON
  body: any;
}

/** A request to 127.0.0.1:port with a chosen Host (no DNS), over HTTP or HTTPS (then SNI = Host, CA given). */
function send(
  url: string,
  o: { method?: string; path: string; host?: string; headers?: Record<string, string>; body?: unknown; ca?: string },
): Promise<Answer> {
  const u = new URL(url);
  const host = o.host ?? u.host;
  const body = o.body === undefined ? undefined : JSON.stringify(o.body);
  const headers = { host, ...(body ? { 'content-type': 'application/json' } : {}), ...o.headers };
  const opts = { host: '127.0.0.1', port: Number(u.port), method: o.method ?? 'GET', path: o.path, headers, agent: false as const };
  return new Promise((resolve, reject) => {
    const done = (res: import('node:http').IncomingMessage) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => {
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {}
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed });
      });
    };
    const r =
      u.protocol === 'https:'
        ? httpsRequest({ ...opts, servername: host.replace(/:\d+$/, ''), ca: o.ca }, done)
        : httpRequest(opts, done);
    r.on('error', reject);
    r.end(body);
  });
}

const signIn = (base: string, key: string, host: string, extra: { headers?: Record<string, string>; ca?: string } = {}) =>
  send(base, { method: 'POST', path: '/console/session', host, headers: { origin: `${base.startsWith('https') ? 'https' : 'http'}://${host}`, ...extra.headers }, body: { key }, ca: extra.ca });

describe('console cookie: the hosts it is set at', () => {
  it('raw ports default to an address and host of their own; NUBE_RAW_HOST at the console host is refused', () => {
    const base = { NUBE_DATA_DIR: '/tmp/nube-config-test', NUBE_SECRET: 'x'.repeat(40) };
    // Loopback nube: the console at 127.0.0.1, raw ports at 127.0.0.2 (a cookie for 127.0.0.1 or
    // localhost never reaches them).
    expect(loadConfig(base).sandboxes.raw).toMatchObject({ bind: '127.0.0.2', host: '127.0.0.2' });
    expect(loadConfig({ ...base, NUBE_HOST: '127.0.0.2' }).sandboxes.raw.bind).toBe('127.0.0.3');
    // A named public URL: raw.<name>, listening where nube listens unless told otherwise.
    expect(loadConfig({ ...base, NUBE_HOST: '0.0.0.0', NUBE_PUBLIC_URL: 'https://Nube.Example.com' }).sandboxes.raw).toMatchObject({
      bind: '0.0.0.0',
      host: 'raw.nube.example.com',
    });
    for (const [env, host] of [
      [{}, '127.0.0.1'],
      [{ NUBE_PUBLIC_URL: 'https://nube.example.com' }, 'nube.example.com'],
      [{ NUBE_PUBLIC_URL: 'https://nube.example.com' }, 'NUBE.example.com'],
    ] as const) {
      expect(() => loadConfig({ ...base, ...env, NUBE_RAW_HOST: host })).toThrow(ConfigError);
      expect(() => loadConfig({ ...base, ...env, NUBE_RAW_HOST: host })).toThrow(/NUBE_RAW_HOST.*console/);
    }
    expect(loadConfig({ ...base, NUBE_TRUST_PROXY: '127.0.0.1, 10.0.0.0/8,::1' }).trustProxy).toEqual(['127.0.0.1', '10.0.0.0/8', '::1']);
    expect(() => loadConfig({ ...base, NUBE_TRUST_PROXY: 'proxy.example' })).toThrow(/NUBE_TRUST_PROXY/);
    expect(() => loadConfig({ ...base, NUBE_TRUST_PROXY: '10.0.0.0/40' })).toThrow(/NUBE_TRUST_PROXY/);
  });

  describe('a loopback nube with the default raw ports', () => {
    let t: TestNube;
    beforeAll(async () => {
      t = await startNube();
    });
    afterAll(() => t?.close());

    it('signs in at its address or localhost over plain HTTP, with a plain HttpOnly cookie', async () => {
      const port = new URL(t.baseUrl).port;
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
        const r = await signIn(t.baseUrl, t.ownerKey, host);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        expect(r.headers['set-cookie']![0]).toMatch(/^nube_console=ncs_\w+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
        expect(r.headers['strict-transport-security']).toBeUndefined();
      }
    });

    it("refuses to sign in at the raw ports' host, or at a name it cannot tell from a tenant's custom domain", async () => {
      const port = new URL(t.baseUrl).port;
      for (const host of [`127.0.0.2:${port}`, `tenant-domain.example:${port}`, `8080-sbx-x.sandbox.localhost:${port}`]) {
        const r = await signIn(t.baseUrl, t.ownerKey, host);
        // (A sandbox port's host is the port proxy's, never the console: no such sandbox here.)
        expect([403, 404, 502], `${host}: ${JSON.stringify(r.body)}`).toContain(r.status);
        expect(r.headers['set-cookie']).toBeUndefined();
        if (r.status === 403) expect(r.body.code).toBe('ConsoleHostRefused');
      }
      expect((await signIn(t.baseUrl, t.ownerKey, `127.0.0.2:${port}`)).body.error).toContain('raw ports');
    });

    it("believes no X-Forwarded-Proto from a peer it does not trust: no Secure cookie, and __Host- is not read", async () => {
      const host = new URL(t.baseUrl).host;
      const r = await signIn(t.baseUrl, t.ownerKey, host, { headers: { 'x-forwarded-proto': 'https' } });
      expect(r.status).toBe(200);
      expect(r.headers['set-cookie']![0]).toMatch(/^nube_console=/);
      expect(r.headers['set-cookie']![0]).not.toContain('Secure');
      // A cookie by the HTTPS name is not the HTTP session (the names are the scheme's).
      const value = r.headers['set-cookie']![0]!.split(';')[0]!.split('=')[1]!;
      const me = await send(t.baseUrl, { path: '/api/v2/account', headers: { cookie: `__Host-nube_console=${value}`, 'x-nube-csrf': r.body.csrfToken } });
      expect(me.status).toBe(401);
    });
  });

  describe('raw ports on every address (NUBE_RAW_BIND=0.0.0.0): HTTPS only', () => {
    let t: TestNube;
    let certDir: string;
    let ca: string;
    let https: string;
    beforeAll(async () => {
      certDir = mkdtempSync(join(tmpdir(), 'nube-cookie-cert-'));
      const files = makeCert(certDir, 'console', ['console.test']);
      ca = readFileSync(files.ca, 'utf8');
      const port = await freePort();
      t = await startNube({
        env: {
          NUBE_PUBLIC_URL: 'https://console.test',
          NUBE_RAW_BIND: '0.0.0.0',
          NUBE_HTTPS_PORT: String(port),
          NUBE_TLS_CERT_FILE: files.cert,
          NUBE_TLS_KEY_FILE: files.key,
          NUBE_TRUST_PROXY: '127.0.0.1',
        },
      });
      https = `https://console.test:${port}`;
    });
    afterAll(async () => {
      await t?.close();
      rmSync(certDir, { recursive: true, force: true });
    });

    it('refuses plain HTTP sign-in, saying why', async () => {
      const r = await signIn(t.baseUrl, t.ownerKey, 'console.test');
      expect(r.status).toBe(403);
      expect(r.body.code).toBe('ConsoleHostRefused');
      expect(r.body.error).toMatch(/raw ports .*listen on this address.*HTTPS/);
      expect(r.headers['set-cookie']).toBeUndefined();
    });

    it('over its own HTTPS: a __Host- cookie with Secure, HSTS, and the cookie works with its token', async () => {
      const host = new URL(https).host;
      const r = await signIn(https, t.ownerKey, host, { ca });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const set = r.headers['set-cookie']![0]!;
      expect(set).toMatch(/^__Host-nube_console=ncs_\w+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+; Secure$/);
      expect(set).not.toMatch(/domain=/i);
      expect(r.headers['strict-transport-security']).toMatch(/max-age=\d+/);
      const cookie = set.split(';')[0]!;
      expect((await send(https, { path: '/api/v2/account', host, headers: { cookie, 'x-nube-csrf': r.body.csrfToken }, ca })).status).toBe(200);
      // The plain name is not this session's over HTTPS.
      const plain = `nube_console=${cookie.split('=')[1]}`;
      expect((await send(https, { path: '/api/v2/account', host, headers: { cookie: plain, 'x-nube-csrf': r.body.csrfToken }, ca })).status).toBe(401);
      const page = await send(https, { path: '/console', host, ca });
      expect(page.headers['strict-transport-security']).toMatch(/max-age=\d+/);
    });

    it('behind a trusted proxy (NUBE_TRUST_PROXY) that says https: Secure, at the forwarded host', async () => {
      // The proxy speaks plain HTTP to nube from 127.0.0.1; the browser spoke HTTPS to console.test.
      const r = await send(t.baseUrl, {
        method: 'POST',
        path: '/console/session',
        host: '127.0.0.1:7070',
        headers: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'console.test', origin: 'https://console.test' },
        body: { key: t.ownerKey },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.headers['set-cookie']![0]).toMatch(/^__Host-nube_console=.*; Secure$/);
      const cookie = r.headers['set-cookie']![0]!.split(';')[0]!;
      const fwd = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'console.test', cookie, 'x-nube-csrf': r.body.csrfToken };
      const db = await send(t.baseUrl, { method: 'POST', path: '/api/v2/databases', headers: { ...fwd, origin: 'https://console.test' }, body: { name: 'via-proxy' } });
      expect(db.status, JSON.stringify(db.body)).toBe(201);
      // The Origin is checked against the forwarded host.
      const wrong = await send(t.baseUrl, { method: 'POST', path: '/api/v2/databases', headers: { ...fwd, origin: `http://${new URL(t.baseUrl).host}` }, body: { name: 'x' } });
      expect(wrong.status).toBe(403);
    });
  });

  describe('a fixed public URL', () => {
    let t: TestNube;
    beforeAll(async () => {
      t = await startNube({ env: { NUBE_PUBLIC_URL: 'http://console.test:7070' } });
    });
    afterAll(() => t?.close());

    it("signs in at the public URL's host only", async () => {
      const ok = await signIn(t.baseUrl, t.ownerKey, 'console.test:7070');
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      for (const host of [new URL(t.baseUrl).host, 'other.test', 'raw.console.test']) {
        const r = await signIn(t.baseUrl, t.ownerKey, host);
        expect(r.status, host).toBe(403);
        expect(r.body.error).toContain('console.test');
      }
    });
  });
});
