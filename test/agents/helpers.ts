// A nube with sandboxes (test bridge and templates), an LLM stub as the operator's upstream, and helpers
// to create agents and read their SSE turns.
import { mkdirSync, rmSync } from 'node:fs';
import WebSocket from 'ws';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { nubeProcess } from '../helpers/nube-process.js';
import type { DialectName } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';
import { SANDBOX_ENV, TEST_ROOT } from '../sandboxes/helpers.js';

export interface AgentNube extends TestNube {
  stub: LlmStub;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, key?: string): Promise<{ status: number; body: any; headers: Headers }>;
  /** Creates an agent and waits until it is running (or fails the test with its error). */
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  agent(body?: Record<string, unknown>, key?: string): Promise<any>;
  /** POST /message and the SSE events it streamed. */
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  message(id: string, content: string, key?: string): Promise<{ status: number; events: any[] }>;
  stop(): Promise<void>;
}

export async function startAgentNube(
  name: string,
  opts: { dialect?: DialectName; env?: Record<string, string>; dataDir?: string; stub?: LlmStub } = {},
): Promise<AgentNube> {
  const stub = opts.stub ?? (await startLlmStub());
  const dir = opts.dataDir ?? `${TEST_ROOT}/agents-${name}-${opts.dialect ?? 'sqlite'}-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  const t = await startNube({
    dialect: opts.dialect,
    dataDir: dir,
    // Polling GET until running is not what these tests measure: the default 600/min would answer 429.
    env: { ...SANDBOX_ENV, NUBE_LLM_BASE_URL: stub.url, NUBE_LLM_API_KEY: 'sk-operator', NUBE_LLM_MODEL: 'stub-model', NUBE_LLM_GATEWAY_PORT: '0', NUBE_RATE_LIMIT_PER_MINUTE: '100000', ...opts.env },
  });
  const call = (method: string, path: string, body?: unknown, key?: string) =>
    callJson(t.baseUrl, method, path, body, { authorization: `Bearer ${key ?? t.ownerKey}` });
  const self: AgentNube = {
    ...t,
    stub,
    call,
    async agent(body = {}, key) {
      const c = await call('POST', '/agents', { template: 'acp', env: {}, ...body }, key);
      if (c.status !== 200) throw new Error(`create answered ${c.status}: ${JSON.stringify(c.body)}`);
      // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
      let last: any;
      for (let i = 0; i < 1200; i++) {
        const g = await call('GET', `/agents/${c.body.id}`, undefined, key);
        last = g.body;
        if (g.body.status === 'running') return { ...g.body, embedToken: c.body.embedToken };
        if (g.body.status === 'lost') throw new Error(`agent build failed: ${g.body.error}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      // What it was doing, and its sandbox, say where it stuck.
      const sbx = last?.sandboxId ? (await call('GET', `/sandboxes/${last.sandboxId}`, undefined, key)).body : null;
      throw new Error(`agent did not start in 60 s: ${JSON.stringify(last)}; sandbox: ${JSON.stringify(sbx)}`);
    },
    message: (id, content, key) => sseMessage(t.baseUrl, key ?? t.ownerKey, id, content),
    async stop() {
      const list = await call('GET', '/agents');
      for (const a of list.body?.agents ?? []) await call('DELETE', `/agents/${a.id}`);
      const runtime = t.nube.services.sandboxes.core.runtime;
      for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
      await t.close();
      if (!opts.stub) await stub.close();
      if (!opts.dataDir) rmSync(dir, { recursive: true, force: true });
    },
  };
  return self;
}

/** POST /agents/{id}/message and the SSE events of its reply (or the error body as the one event). */
// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export async function sseMessage(baseUrl: string, key: string, id: string, content: string): Promise<{ status: number; events: any[] }> {
  const r = await fetch(`${baseUrl}/api/v2/agents/${id}/message`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ content }),
  });
  const text = await r.text();
  if (r.status !== 200) return { status: r.status, events: [JSON.parse(text)] };
  const events = text
    .split('\n\n')
    .filter((e) => e.startsWith('data:'))
    .map((e) => JSON.parse(e.slice(5)));
  return { status: r.status, events };
}

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export const textOf = (events: any[]) => events.filter((e) => e.type === 'chunk').map((e) => e.value).join('');

/** An ACP client over an agent's wsUrl: every message kept in `inbox`, `request` waits for its answer. */
// biome-ignore lint/suspicious/noExplicitAny: JSON-RPC messages
export async function acpSocket(url: string, headers: Record<string, string>, onMessage?: (m: any, ws: WebSocket) => void) {
  const ws = await new Promise<WebSocket>((resolve, reject) => {
    const w = new WebSocket(url, { headers });
    w.once('open', () => resolve(w));
    w.once('unexpected-response', (_req, res) => reject(new Error(`status ${res.statusCode}`)));
    w.once('error', reject);
  });
  // biome-ignore lint/suspicious/noExplicitAny: JSON-RPC messages
  const inbox: any[] = [];
  const waiters: (() => void)[] = [];
  ws.on('message', (d) => {
    const m = JSON.parse(String(d));
    inbox.push(m);
    onMessage?.(m, ws);
    for (const w of waiters.splice(0)) w();
  });
  // biome-ignore lint/suspicious/noExplicitAny: JSON-RPC messages
  const request = async (id: number, method: string, params: unknown): Promise<any> => {
    ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    for (;;) {
      const got = inbox.find((m) => m.id === id && !m.method);
      if (got) return got;
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  return { ws, inbox, request };
}

/**
 * A command run in a sandbox as root inside, its stdout (the way an agent's own tools, or an end user
 * who talked its model into running one, read what the sandbox holds).
 */
export async function shellIn(t: AgentNube, sandboxId: string, command: string): Promise<string> {
  const r = await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command, timeoutSeconds: 60 });
  if (r.status !== 200) throw new Error(`exec answered ${r.status}: ${JSON.stringify(r.body)}`);
  return String(r.body.stdout);
}

/**
 * The agent program's gateway credential, read out of its memory by root inside (it is in no
 * environment and no file): what an attacker in the box can always get.
 */
export async function credentialFromMemory(t: AgentNube, sandboxId: string): Promise<string> {
  const py = String.raw`
import re, glob
pat = re.compile(rb'nube_llm_[A-Za-z0-9]{40}')
found = set()
for d in glob.glob('/proc/[0-9]*'):
    try:
        cmd = open(d + '/cmdline', 'rb').read()
        if b'/opt/nube/agent.js' not in cmd: continue
        mem = open(d + '/mem', 'rb', 0)
        for line in open(d + '/maps'):
            parts = line.split()
            if 'r' not in parts[1] or (len(parts) > 5 and parts[5].startswith('[v')): continue
            a, b = (int(x, 16) for x in parts[0].split('-'))
            try:
                mem.seek(a); found.update(pat.findall(mem.read(b - a)))
            except Exception: pass
    except Exception: pass
print('\n'.join(sorted(x.decode() for x in found)))
`;
  const out = await shellIn(t, sandboxId, `python3 - <<'PYEOF'\n${py}\nPYEOF`);
  const keys = out.split('\n').filter(Boolean);
  if (keys.length === 0) throw new Error('no gateway credential in the agent program\'s memory');
  return keys[0]!;
}

/**
 * nube with sandboxes and the LLM stub as a child process on one data directory, for tests that stop it
 * the hard way (`signal`: SIGKILL as a crash, SIGTERM as an operator's stop) and start it again.
 */
export async function spawnAgentNube(name: string, opts: { dialect?: DialectName; env?: Record<string, string> } = {}) {
  const stub = await startLlmStub();
  const n = await nubeProcess(opts.dialect ?? 'sqlite', `${TEST_ROOT}/proc-${name}-${process.pid}`, {
    ...SANDBOX_ENV,
    NUBE_LLM_BASE_URL: stub.url,
    NUBE_LLM_API_KEY: 'sk-operator',
    NUBE_LLM_MODEL: 'stub-model',
    NUBE_LLM_GATEWAY_PORT: '0',
    NUBE_RATE_LIMIT_PER_MINUTE: '100000',
    ...opts.env,
  });
  await n.start();
  return {
    base: n.base,
    ownerKey: n.ownerKey,
    stub,
    call: n.call,
    /** Stops it with `signal` and waits for the exit. */
    stop: (signal: NodeJS.Signals) => n.stop(signal),
    start: () => n.start(),
    /** Stops it and removes its data, database and stub (after the test deleted what it made in sandboxes). */
    async remove() {
      await n.close();
      await stub.close();
    },
  };
}
