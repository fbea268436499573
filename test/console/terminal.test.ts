// sandboxes.terminal: a PTY shell in a sandbox over a WebSocket, through the SDK's openTerminal (Node,
// `ws`) and the console's cookie: keystrokes in, output back, resize, exit status, and the refusals
// (plain GET 426, another owner's sandbox 404, no credential 401, the cookie from another site 403).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { Nube, type Terminal, type WebSocketClass } from '../../packages/sdk/src/index.js';
import { newOwnerKey } from '../helpers/server.js';
import { createRunning, type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS } from '../sandboxes/helpers.js';

/** Collects a terminal's output as text and waits for a pattern in it. */
function reader(term: Terminal) {
  let text = '';
  const decoder = new TextDecoder();
  term.onData((d) => {
    text += decoder.decode(d, { stream: true });
  });
  return {
    get text() {
      return text;
    },
    async waitFor(re: RegExp, ms = 15_000): Promise<RegExpMatchArray> {
      const end = Date.now() + ms;
      for (;;) {
        const m = text.match(re);
        if (m) return m;
        if (Date.now() > end) throw new Error(`no ${re} in terminal output: ${JSON.stringify(text.slice(-500))}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

/** The upgrade's HTTP answer when nube refuses it. */
function refusal(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('open', () => {
      ws.close();
      reject(new Error('the upgrade was accepted'));
    });
    ws.on('error', () => {});
  });
}

describe('sandboxes.terminal (WebSocket PTY)', () => {
  let t: SandboxNube;
  let nube: Nube;
  let id: string;
  beforeAll(async () => {
    t = await startSandboxNube('console-terminal');
    nube = new Nube({ baseUrl: t.baseUrl, apiKey: t.ownerKey });
    id = (await createRunning(t, { template: 'base' })).id;
  }, TEMPLATE_WAIT_MS);
  afterAll(() => t && stopSandboxNube(t));

  it('runs what is typed and reads it back; resize reaches the PTY; exit ends it with its status', async () => {
    const term = nube.openTerminal(id, { rows: 30, cols: 100, WebSocket: WebSocket as unknown as WebSocketClass });
    const out = reader(term);
    await term.ready;
    term.write('echo hola\r');
    await out.waitFor(/\rhola\r\n/);
    term.write('stty size\r');
    await out.waitFor(/\r30 100\r\n/);
    term.resize(40, 120);
    term.write('stty size; tty\r');
    await out.waitFor(/\r40 120\r\n\/dev\/pts\/\d+/);
    const exit = new Promise<number | null>((r) => term.onExit(r));
    term.write('exit 7\r');
    expect(await exit).toBe(7);
  }, 60_000);

  it('keystroke echo round trip on loopback (p50 under 10 ms)', async () => {
    const term = nube.openTerminal(id, { WebSocket: WebSocket as unknown as WebSocketClass });
    const out = reader(term);
    await term.ready;
    // Raw and without echo: one byte back per key, so each wait is for that key's own byte.
    term.write('stty raw -echo; cat\r');
    await new Promise((r) => setTimeout(r, 500));
    const base = out.text.length;
    const times: number[] = [];
    for (let i = 0; i < 60; i++) {
      const t0 = performance.now();
      term.write(String.fromCharCode(97 + (i % 26)));
      while (out.text.length < base + i + 1) await new Promise((r) => setImmediate(r));
      times.push(performance.now() - t0);
    }
    expect(out.text.length).toBe(base + 60);
    term.close();
    times.sort((a, b) => a - b);
    const p50 = times[Math.floor(times.length / 2)]!;
    console.log(`terminal echo p50 ${p50.toFixed(2)} ms, p99 ${times[times.length - 1]!.toFixed(2)} ms`);
    expect(p50).toBeLessThan(10);
  }, 60_000);

  it('answers a plain GET with 426, and refuses upgrades without a credential, for another owner, or cross-site', async () => {
    const plain = await t.call('GET', `/sandboxes/${id}/terminal`);
    expect(plain.status).toBe(426);
    expect(plain.body.code).toBe('UpgradeRequired');
    const url = `${t.baseUrl.replace('http', 'ws')}/api/v2/sandboxes/${id}/terminal`;
    expect((await refusal(url, {})).status).toBe(401);
    const other = await t.nube.services.account.createAccount({ name: 'other', plan: 'byte', keyValue: newOwnerKey() });
    expect((await refusal(url, { authorization: `Bearer ${other.secret}` })).status).toBe(404);
    expect((await refusal(`${url}?rows=1`, { authorization: `Bearer ${t.ownerKey}` })).status).toBe(400);
    // The console's cookie: only from this host's own pages, and only with the session's CSRF token,
    // which a browser's WebSocket sends as a subprotocol.
    const r = await fetch(`${t.baseUrl}/console/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin: t.baseUrl }, body: JSON.stringify({ key: t.ownerKey }) });
    const cookie = r.headers.get('set-cookie')!.split(';')[0]!;
    const { csrfToken } = (await r.json()) as { csrfToken: string };
    const protocol = `nube-csrf.${csrfToken}`;
    const cross = await refusal(url, { cookie, origin: 'http://evil.example', 'sec-websocket-protocol': protocol });
    expect(cross.status).toBe(403);
    expect(JSON.parse(cross.body).code).toBe('CrossSiteRequest');
    expect((await refusal(url, { cookie, origin: t.baseUrl })).status).toBe(401);
    expect((await refusal(url, { cookie, origin: t.baseUrl, 'sec-websocket-protocol': 'nube-csrf.wrong' })).status).toBe(401);
    const ws = new WebSocket(url, [protocol], { headers: { cookie, origin: t.baseUrl } });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    ws.close();
  }, 60_000);
});
