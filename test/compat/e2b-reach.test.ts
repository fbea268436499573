// The standing test of what an E2B sandbox's tokens reach (issue 27; their rows in
// src/platform/credential-reach.ts). `envdAccessToken` opens envd of its one sandbox (Connect RPC,
// /files, /health, the interpreter's routes; at the root with E2b-Sandbox-Id or at its envd host);
// `trafficAccessToken` (another value) opens that sandbox's ports when they are not public, and no envd
// route (a browser given it to call an app must not run commands). Nothing
// else: not another sandbox of the same owner or another's, not E2B's control plane (the owner key's),
// no API operation, MCP, WebSocket or libSQL.
import { request } from 'node:http';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { operations } from '../../src/areas/index.js';
import { fileSignature } from '../../src/compat/e2b/access.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;

/** A request to nube as `host` (nube's own host unless a port host is given). */
function send(
  path: string,
  opts: { method?: string; host?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const port = Number(new URL(t.baseUrl).port);
    const headers = { host: opts.host ?? `127.0.0.1:${port}`, ...(opts.headers ?? {}) };
    const req = request({ host: '127.0.0.1', port, path, method: opts.method ?? 'GET', headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('what an E2B sandbox token reaches', () => {
  let a: Sandbox;
  let b: Sandbox;
  let foreign: Sandbox;
  /** The envd token of `a`, and its traffic token. */
  let token: string;
  let traffic: string;

  /** The envd requests an SDK makes, as `sandboxId` with `tok`: each answers its status. */
  const envd = async (sandboxId: string, tok: string, header = 'x-access-token') => {
    const h = { 'e2b-sandbox-id': sandboxId, [header]: tok };
    const rpc = { ...h, 'content-type': 'application/json' };
    return {
      health: (await send('/health', { headers: h })).status,
      files: (await send('/files?path=/etc/hostname', { headers: h })).status,
      upload: (await send('/files?path=/tmp/reach.txt', { method: 'POST', headers: { ...h, 'content-type': 'application/octet-stream' }, body: 'x' })).status,
      stat: (await send('/filesystem.Filesystem/Stat', { method: 'POST', headers: rpc, body: '{"path":"/etc"}' })).status,
      list: (await send('/process.Process/List', { method: 'POST', headers: rpc, body: '{}' })).status,
      contexts: (await send('/contexts', { headers: h })).status,
    };
  };

  beforeAll(async () => {
    t = await startE2bNube('e2b-reach', ['base'], { NUBE_RATE_LIMIT_PER_MINUTE: '1000000', NUBE_SANDBOX_CREATE_PER_MINUTE: '100' });
    const intruder = await t.nube.services.account.createAccount({ name: 'e2b-foreign', plan: 'tera' });
    const closed = { timeoutMs: 600_000, network: { allowPublicTraffic: false } };
    [a, b, foreign] = await Promise.all([Sandbox.create(closed), Sandbox.create(closed), Sandbox.create({ ...closed, apiKey: intruder.secret })]);
    token = (a as unknown as { envdAccessToken: string }).envdAccessToken;
    traffic = a.trafficAccessToken!;
    // A server on port 8080 of each, for the traffic token.
    await Promise.all([a, b, foreign].map((s) => s.commands.run('python3 -m http.server 8080 --directory /tmp', { background: true })));
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
  }, 120_000);

  it('the table: envd and the ports of its one sandbox, and no operation', () => {
    const rows = CREDENTIAL_REACH.filter((c) => c.credential.startsWith('E2B '));
    expect(rows.map((r) => r.credential.match(/`(\w+AccessToken)`/)?.[1])).toEqual(['envdAccessToken', 'trafficAccessToken']);
    for (const r of rows) {
      expect(r.operations).toEqual([]);
      expect(r.scheme).toBeUndefined();
    }
    expect(rows[0]!.routes).toMatch(/envd/);
    expect(rows[1]!.routes).toMatch(/e2b-traffic-access-token/);
  });

  it("the envd token opens its own sandbox's envd, at the root and at its envd host; the traffic token does not", async () => {
    const info = await Sandbox.connect(a.sandboxId);
    expect(info.trafficAccessToken).toBe(traffic);
    expect(traffic).not.toBe(token);
    const all = { health: 204, files: 200, upload: 200, stat: 200, list: 200, contexts: 200 };
    const none = { health: 401, files: 401, upload: 401, stat: 401, list: 401, contexts: 401 };
    expect(await envd(a.sandboxId, token)).toEqual(all);
    // envd takes its token in X-Access-Token only; the traffic token opens no envd route in either header,
    // only the interpreter's (a port of the sandbox, as at E2B, where its context calls send that token).
    expect(await envd(a.sandboxId, token, 'e2b-traffic-access-token')).toEqual(none);
    expect(await envd(a.sandboxId, traffic)).toEqual(none);
    expect(await envd(a.sandboxId, traffic, 'e2b-traffic-access-token')).toEqual({ ...none, contexts: 200 });
    expect((await send('/health', { host: a.getHost(49983), headers: { 'x-access-token': traffic } })).status).toBe(401);
    const host = { host: a.getHost(49983), headers: { 'x-access-token': token } };
    expect((await send('/health', host)).status).toBe(204);
    expect((await send('/files?path=/tmp/reach.txt', host)).body).toBe('x');
    // It signs its sandbox's file URLs (what downloadUrl makes), and only for that sandbox.
    const sig = fileSignature({ path: '/tmp/reach.txt', operation: 'read', username: '' }, token);
    const signed = `/files?path=%2Ftmp%2Freach.txt&signature=${encodeURIComponent(sig)}`;
    expect(await send(signed)).toEqual({ status: 200, body: 'x' });
    expect((await send(signed, { headers: { 'e2b-sandbox-id': b.sandboxId } })).status).toBe(401);
  });

  it("opens its sandbox's private ports as the traffic token, and no other sandbox's", async () => {
    const port = (s: Sandbox, headers: Record<string, string> = {}) => send('/', { host: s.getHost(8080), headers });
    /** The status with its own token once its server is up (502 while it starts). */
    const up = async (s: Sandbox) => {
      let r = { status: 0, body: '' };
      for (let i = 0; i < 100 && (r.status === 0 || r.status === 502); i++) {
        r = await port(s, { 'e2b-traffic-access-token': s.trafficAccessToken! });
        if (r.status === 502) await wait(100);
      }
      return r.status;
    };
    expect([await up(a), await up(b), await up(foreign)]).toEqual([200, 200, 200]);
    expect((await port(a)).status).toBe(403);
    // Ports look at e2b-traffic-access-token only, and take the traffic token only (not the envd one).
    expect((await port(a, { 'x-access-token': traffic })).status).toBe(403);
    expect((await port(a, { 'e2b-traffic-access-token': token })).status).toBe(403);
    for (const other of [b, foreign]) {
      expect((await port(other, { 'e2b-traffic-access-token': traffic })).status).toBe(403);
    }
  });

  it("is refused on another sandbox's envd, the owner's own or another account's", async () => {
    const none = { health: 401, files: 401, upload: 401, stat: 401, list: 401, contexts: 401 };
    for (const other of [b, foreign]) {
      expect(await envd(other.sandboxId, token)).toEqual(none);
      expect(await envd(other.sandboxId, token, 'e2b-traffic-access-token')).toEqual(none);
      expect(await envd(other.sandboxId, traffic, 'e2b-traffic-access-token')).toEqual(none);
      // The streaming RPCs and the interpreter's routes too.
      const h = { 'e2b-sandbox-id': other.sandboxId, 'x-access-token': token, 'content-type': 'application/connect+json' };
      const start = '{"process":{"cmd":"/bin/sh","args":["-c","touch /tmp/pwned"]}}';
      const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, start.length]), Buffer.from(start)]).toString('latin1');
      for (const [method, path, body] of [
        ['POST', '/process.Process/Start', envelope],
        ['POST', '/filesystem.Filesystem/WatchDir', envelope],
        ['POST', '/execute', '{"code":"1"}'],
        ['POST', '/contexts', '{}'],
        ['DELETE', '/contexts/x', undefined],
        ['POST', '/contexts/x/restart', '{}'],
      ] as const) {
        expect((await send(path, { method, headers: h, body })).status, path).toBe(401);
      }
      const host = { host: other.getHost(49983), headers: { 'x-access-token': token } };
      expect((await send('/health', host)).status).toBe(401);
      expect((await send('/files?path=/etc/hostname', host)).status).toBe(401);
    }
    // Without naming a sandbox it opens nothing (the route is not envd's then).
    expect((await send('/health', { headers: { 'x-access-token': token } })).status).toBe(404);
    // Nothing was written where the token was refused.
    expect(await b.files.exists('/tmp/reach.txt')).toBe(false);
    expect(await b.files.exists('/tmp/pwned')).toBe(false);
  });

  it("is no API credential: every operation, MCP, the WebSockets, libSQL and E2B's control plane refuse it", async () => {
    const forms: Record<string, string>[] = [
      { authorization: `Bearer ${token}` },
      { 'x-api-key': token },
      { 'x-access-token': token, 'e2b-sandbox-id': a.sandboxId },
      { authorization: `Bearer ${traffic}` },
    ];
    const nubeId = a.sandboxId.replace('sbx-', 'sbx_');
    const wrong: string[] = [];
    for (const op of operations.filter((o) => !o.websocket)) {
      const path = op.path.replace(/\{[A-Za-z0-9_]+\}/g, nubeId);
      const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
      for (const cred of forms) {
        const r = await fetch(`${t.baseUrl}/api/v2${path}`, { method: op.method, headers: { ...cred, ...(body ? { 'content-type': 'application/json' } : {}) }, body });
        if (r.status !== 401) wrong.push(`${op.id} ${Object.keys(cred)[0]}: ${r.status}`);
      }
    }
    for (const op of operations.filter((o) => o.websocket)) {
      const url = `${t.baseUrl.replace(/^http/, 'ws')}/api/v2${op.path.replace(/\{[A-Za-z0-9_]+\}/g, nubeId)}?token=${encodeURIComponent(token)}`;
      const status = await new Promise<number>((resolve) => {
        const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
        ws.once('open', () => {
          ws.close();
          resolve(101);
        });
        ws.once('unexpected-response', (_r, res) => resolve(res.statusCode ?? 0));
        ws.once('error', () => resolve(0));
      });
      if (status !== 401) wrong.push(`${op.id} websocket: ${status}`);
    }
    for (const cred of forms) {
      const mcp = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: { ...cred, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      if (mcp.status !== 401) wrong.push(`mcp ${Object.keys(cred)[0]}: ${mcp.status}`);
      const db = await fetch(`${t.baseUrl}/libsql/db_x/v2/pipeline`, { method: 'POST', headers: { ...cred, 'content-type': 'application/json' }, body: '{"requests":[]}' });
      if (db.status !== 401) wrong.push(`libsql ${Object.keys(cred)[0]}: ${db.status}`);
    }
    // Every route of E2B's control plane, as the server has them (a new one is swept too).
    const control = controlRoutes();
    expect(control.length).toBeGreaterThan(10);
    for (const [method, pattern] of control) {
      const path = pattern.replace(/:[A-Za-z]+/g, a.sandboxId);
      for (const cred of forms) {
        const r = await send(path, { method, headers: { ...cred, 'content-type': 'application/json' }, body: method === 'GET' || method === 'DELETE' ? undefined : '{}' });
        // The template SDK's uploads take no credential at all: the signed URL is the capability, so a
        // made-up one is refused as such (403), whatever header comes with it.
        const signed = pattern.startsWith('/e2b/template-files/');
        if (signed ? r.status !== 403 || !r.body.includes('signed URL is not valid') : r.status !== 401) wrong.push(`e2b ${method} ${path} ${Object.keys(cred)[0]}: ${r.status} ${r.body.slice(0, 100)}`);
      }
    }
    expect(wrong).toEqual([]);
    // Refused, and nothing happened to the sandbox: it runs, with its timeout untouched.
    expect(await a.isRunning()).toBe(true);
  }, 180_000);
});

/** [method, path] of every route under /e2b/, read from the server's routing table (a tree of path pieces). */
function controlRoutes(): [string, string][] {
  const out: [string, string][] = [];
  let stack: string[] = [];
  for (const line of t.nube.app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([A-Z, ]+)\))?/.exec(line);
    if (!m) continue;
    stack = [...stack.slice(0, m[1]!.length / 4), m[2]!];
    const path = stack.join('');
    if (!path.startsWith('/e2b/') || !m[3]) continue;
    for (const method of m[3].split(', ')) if (['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].includes(method)) out.push([method, path]);
  }
  // What E2B has and nube does not (templates, secrets, teams) answers past the same door.
  out.push(['GET', '/e2b/templates'], ['GET', '/e2b/secrets'], ['GET', '/e2b/teams']);
  return out;
}
