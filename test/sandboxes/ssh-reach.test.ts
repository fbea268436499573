// The standing test of what an SSH ticket reaches (issue 27; its row in src/platform/credential-reach.ts):
// the SSH gateway as the one sandbox it was made for: a shell or command, SFTP, forwarding to what that
// sandbox itself reaches, and ports listening inside it. Nothing else: no API operation, MCP or
// WebSocket; no other sandbox (the owner's or another's); no other subsystem or channel kind; no host
// service through forwarding (the sandbox's network policy applies to it); and not after ssh-disable.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import ssh2 from 'ssh2';
import WebSocket from 'ws';
import { operations } from '../../src/areas/index.js';
import { CREDENTIAL_REACH } from '../../src/platform/credential-reach.js';
import { createRunning, DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS } from './helpers.js';

interface Ticket {
  host: string;
  port: number;
  user: string;
  password: string;
}

/** An authenticated ssh2 connection, or the reason it was not made. */
function connect(tk: Ticket, user = tk.user): Promise<ssh2.Client | string> {
  return new Promise((resolve) => {
    const c = new ssh2.Client();
    c.once('ready', () => resolve(c));
    c.once('error', (e: Error) => resolve(e.message));
    c.connect({ host: tk.host, port: tk.port, username: user, password: tk.password, readyTimeout: 30_000, tryKeyboard: false });
  });
}

const run = (c: ssh2.Client, cmd: string): Promise<string> =>
  new Promise((resolve, reject) =>
    c.exec(cmd, (err, ch) => {
      if (err) return reject(err);
      let out = '';
      ch.on('data', (d: Buffer) => (out += d));
      ch.stderr.on('data', () => {});
      ch.on('close', () => resolve(out));
    }),
  );

/** Opens a direct-tcpip channel and says what came back for an HTTP request (or why it failed). */
const forwardOut = (c: ssh2.Client, host: string, port: number): Promise<string> =>
  new Promise((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), 15_000);
    c.forwardOut('127.0.0.1', 40000, host, port, (err, ch) => {
      if (err) {
        clearTimeout(timer);
        return resolve(`refused: ${err.message}`);
      }
      let got = '';
      ch.on('data', (d: Buffer) => (got += d));
      ch.on('close', () => {
        clearTimeout(timer);
        resolve(got.split('\r\n')[0] || 'closed');
      });
      ch.end('GET / HTTP/1.0\r\n\r\n');
    });
  });

describe.each(DRIVERS)('%s: what an SSH ticket reaches', (driver) => {
  let t: SandboxNube;
  let a: string;
  let b: string;
  let foreign: string;
  let tk: Ticket;

  beforeAll(async () => {
    t = await startSandboxNube('ssh-reach', { NUBE_SANDBOX_DRIVER: driver });
    a = (await createRunning(t, { timeoutSeconds: 900 })).id;
    b = (await createRunning(t, { timeoutSeconds: 900 })).id;
    const intruder = await t.nube.services.account.createAccount({ name: `foreign-${driver}`, plan: 'tera' });
    const h = { authorization: `Bearer ${intruder.secret}` };
    foreign = (await createRunning({ call: (m, p, body) => t.call(m, p, body, h) }, { timeoutSeconds: 900 })).id;
    for (const [id, hh] of [[a, {}], [b, {}], [foreign, h]] as const) expect((await t.call('POST', `/sandboxes/${id}/ssh-enable`, undefined, hh)).status).toBe(200);
    tk = (await t.call('POST', `/sandboxes/${a}/ssh-ticket`)).body;
    // Something for forwarding to find inside the sandbox.
    await t.call('POST', `/sandboxes/${a}/bg`, { command: 'exec python3 -m http.server 8090 --bind 127.0.0.1' });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
  }, 120_000);

  it('the table: the SSH gateway, as its one sandbox, and no operation', () => {
    const row = CREDENTIAL_REACH.find((c) => c.credential === 'SSH ticket')!;
    expect(row.operations).toEqual([]);
    expect(row.routes).toMatch(/SSH gateway/);
  });

  it('is no API credential: every operation, MCP and the WebSockets answer 401', async () => {
    const wrong: string[] = [];
    for (const op of operations.filter((o) => !o.websocket)) {
      const path = op.path.replace(/\{[A-Za-z0-9_]+\}/g, a);
      const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
      for (const cred of [{ authorization: `Bearer ${tk.password}` }, { 'x-api-key': tk.password }] as Record<string, string>[]) {
        const headers = { ...cred, ...(body ? { 'content-type': 'application/json' } : {}) };
        const r = await fetch(`${t.baseUrl}/api/v2${path}`, { method: op.method, headers, body });
        if (r.status !== 401) wrong.push(`${op.id}: ${r.status}`);
      }
    }
    expect(wrong).toEqual([]);
    const mcp = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tk.password}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(mcp.status).toBe(401);
    for (const op of operations.filter((o) => o.websocket)) {
      const url = `${t.baseUrl.replace(/^http/, 'ws')}/api/v2${op.path.replace(/\{[A-Za-z0-9_]+\}/g, a)}`;
      const status = await new Promise<number>((resolve) => {
        const ws = new WebSocket(url, { headers: { authorization: `Bearer ${tk.password}` } });
        ws.once('open', () => resolve(101));
        ws.once('unexpected-response', (_r, res) => resolve(res.statusCode ?? 0));
        ws.once('error', () => resolve(0));
      });
      expect(status, op.id).toBe(401);
    }
  }, 120_000);

  it("opens its own sandbox only: not the owner's other sandbox, not another owner's", async () => {
    for (const user of [b, foreign, 'root', `${a}x`]) {
      const c = await connect(tk, user);
      expect(typeof c, user).toBe('string');
    }
    const c = await connect(tk);
    if (typeof c === 'string') throw new Error(c);
    expect((await run(c, 'hostname')).trim()).toBe(a.replace('_', '-'));
    c.end();
  }, 120_000);

  it('a shell, a command, SFTP and forwarding inside the sandbox; no other subsystem or channel kind', async () => {
    const c = await connect(tk);
    if (typeof c === 'string') throw new Error(c);
    try {
      expect(await run(c, 'echo in')).toBe('in\n');
      const sftp = await new Promise<ssh2.SFTPWrapper>((resolve, reject) => c.sftp((e, s) => (e ? reject(e) : resolve(s))));
      expect((await new Promise<string[]>((resolve, reject) => sftp.readdir('/', (e, l) => (e ? reject(e) : resolve(l.map((x) => x.filename)))))).sort()).toContain('root');
      sftp.end();
      const other = await new Promise<string>((resolve) => c.subsys('netconf', (e) => resolve(e ? 'refused' : 'opened')));
      expect(other).toBe('refused');
      const unix = await new Promise<string>((resolve) => c.openssh_forwardOutStreamLocal('/run/nube.sock', (e) => resolve(e ? 'refused' : 'opened')));
      expect(unix).toBe('refused');
      // Forwarding reaches what the sandbox reaches: its own loopback.
      expect(await forwardOut(c, '127.0.0.1', 8090)).toMatch(/^HTTP\/1\.0 200/);
      // ssh -R: the port listens inside the sandbox, not on nube's host.
      const port = await new Promise<number>((resolve, reject) => c.forwardIn('127.0.0.1', 0, (e, p) => (e ? reject(e) : resolve(p))));
      expect((await run(c, `python3 -c 'import socket; socket.create_connection(("127.0.0.1", ${port}), 2); print("inside")'`)).trim()).toBe('inside');
    } finally {
      c.end();
    }
  }, 120_000);

  it("forwarding never reaches nube's host, the cloud metadata address or another sandbox", async () => {
    const c = await connect(tk);
    if (typeof c === 'string') throw new Error(c);
    try {
      const runtime = t.nube.services.sandboxes.core.runtime;
      const hostIp = await runtime.hostAddress();
      const apiPort = Number(new URL(t.baseUrl).port);
      // A service on the host's bridge address, which the host itself reaches.
      const host = createServer((_q, res) => res.end('host secret'));
      await new Promise<void>((r) => host.listen(0, hostIp, () => r()));
      const hostPort = (host.address() as AddressInfo).port;
      expect(await (await fetch(`http://${hostIp}:${hostPort}/`)).text()).toBe('host secret');
      const bAddress = await runtime.addressOf((await t.nube.services.sandboxes.core.repo.get(b))!.runtime_id);
      await t.call('POST', `/sandboxes/${b}/bg`, { command: 'exec python3 -m http.server 8091' });
      for (const [addr, port] of [
        [hostIp, hostPort],
        ['127.0.0.1', apiPort],
        ['169.254.169.254', 80],
        [bAddress, 8091],
      ] as const) {
        expect(await forwardOut(c, addr, port), `${addr}:${port}`).not.toMatch(/^HTTP/);
      }
      host.close();
    } finally {
      c.end();
    }
  }, 120_000);

  it('ends with ssh-disable: live sessions closed, the ticket refused', async () => {
    const c = await connect(tk);
    if (typeof c === 'string') throw new Error(c);
    const closed = new Promise<void>((resolve) => c.once('close', () => resolve()));
    expect((await t.call('POST', `/sandboxes/${a}/ssh-disable`)).body.closedSessions).toBeGreaterThanOrEqual(1);
    await closed;
    expect(typeof (await connect(tk))).toBe('string');
  }, 60_000);
});
