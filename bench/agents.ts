// Agents benchmark: `npm run bench -- agents`. A real nube (in this process, SQLite, namespaces driver)
// whose LLM upstream is the OpenAI-protocol stub (test/helpers/llm-stub.ts) in a child process. The
// baseline, measured in the same run: the stub called directly (its time to first token, and its whole
// streamed answer), which is the floor any agent turn pays. Rows: create -> running (template built),
// /message time to first chunk, /try round trip, and 20 agents running at once each answering a turn;
// for goose (when provisioned): create -> running against goose's own start on the host, and /try.
// Writes bench/results/agents.json.
import { fork, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GOOSE } from '../src/areas/sandboxes/runtime/namespaces/host-tools.js';
import { startLlmStub } from '../test/helpers/llm-stub.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';
import { startSandboxNube } from './lib/sandbox-nube.js';

const N = Number(process.env.BENCH_AGENTS_N ?? 40);
const CREATES = Number(process.env.BENCH_AGENTS_CREATES ?? 10);
const FLEET = 20;
const GOOSE_CREATES = Number(process.env.BENCH_AGENTS_GOOSE ?? 5);

/** goose itself on the host, no sandbox and no nube: spawn `goose acp`, ms until initialize is answered. */
function gooseInitialize(): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const home = mkdtempSync(join(tmpdir(), 'goose-bench-'));
    const p = spawn(GOOSE.hostPath, ['acp'], { env: { PATH: process.env.PATH, HOME: home, GOOSE_DISABLE_KEYRING: '1', GOOSE_TELEMETRY_ENABLED: 'false' } });
    p.stdout.once('data', () => {
      resolve(performance.now() - t0);
      p.kill();
      rmSync(home, { recursive: true, force: true });
    });
    p.once('error', reject);
    p.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } })}\n`);
  });
}

if (process.argv[2] === 'stub') {
  // The stub in its own process: its timings are not disturbed by nube's event loop.
  const stub = await startLlmStub();
  process.send?.({ url: stub.url });
} else {
  await main();
}

/** Time to the first SSE `data:` event carrying text, and to the end, of one POST. */
async function timedStream(url: string, headers: Record<string, string>, body: unknown, isFirst: (data: string) => boolean) {
  const t0 = performance.now();
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${url} answered ${r.status}: ${await r.text()}`);
  let first = Number.NaN;
  let pending = '';
  const decoder = new TextDecoder();
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    if (Number.isNaN(first)) {
      pending += decoder.decode(chunk, { stream: true });
      for (const e of pending.split('\n\n').slice(0, -1)) if (e.startsWith('data:') && isFirst(e.slice(5).trim())) first = performance.now() - t0;
      pending = pending.slice(pending.lastIndexOf('\n\n') + 2);
    }
  }
  return { first, total: performance.now() - t0 };
}

async function main() {
  const child = fork(fileURLToPath(import.meta.url), ['stub'], { execArgv: ['--import', 'tsx'] });
  const stubUrl = await new Promise<string>((resolve) => child.once('message', (m: { url: string }) => resolve(m.url)));
  const { nube, key, dataDir, baseUrl } = await startSandboxNube('agents', 'nubeb0:10.79.0.1/16', {
    NUBE_LLM_BASE_URL: stubUrl,
    NUBE_LLM_GATEWAY_PORT: '0',
    // The bench polls GET /agents/{id} every 5 ms: the default 600 per minute would answer 429.
    NUBE_RATE_LIMIT_PER_MINUTE: '1000000',
  });
  const base = `${baseUrl}/api/v2`;
  const auth = { authorization: `Bearer ${key}` };
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { ...auth, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    // biome-ignore lint/suspicious/noExplicitAny: bench reads arbitrary JSON
    return { status: r.status, body: (await r.json()) as any };
  };
  const createRunning = async (template = 'acp'): Promise<{ id: string; ms: number }> => {
    const t0 = performance.now();
    const c = await call('POST', '/agents', { template, env: {} });
    if (c.status !== 200) throw new Error(`create: ${c.status} ${JSON.stringify(c.body)}`);
    for (;;) {
      const g = await call('GET', `/agents/${c.body.id}`);
      if (g.body.status === 'running') return { id: c.body.id, ms: performance.now() - t0 };
      if (g.status !== 200) throw new Error(`GET answered ${g.status}`);
      if (g.body.status === 'lost') throw new Error(`build failed: ${g.body.error}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  try {
    // Warm-up: the template exists; the first create also bundles the agent program and starts the gateway.
    const warm = await createRunning();
    await call('DELETE', `/agents/${warm.id}`);

    const stubFirst: number[] = [];
    const stubTotal: number[] = [];
    const hi = (i: number) => ({ stream: true, messages: [{ role: 'user', content: `hola ${i}` }] });
    for (let i = 0; i < N; i++) {
      const s = await timedStream(`${stubUrl}/chat/completions`, {}, hi(i), (d) => d !== '[DONE]' && /"content":"[^"]/.test(d));
      stubFirst.push(s.first);
      stubTotal.push(s.total);
    }
    const sf = summarize(stubFirst);
    const st = summarize(stubTotal);
    rows.push({ name: 'stub: time to first token (direct, the baseline)', p50Ms: sf.p50Ms, p99Ms: sf.p99Ms });
    rows.push({ name: 'stub: whole streamed answer (direct, the baseline)', p50Ms: st.p50Ms, p99Ms: st.p99Ms });

    const creates: number[] = [];
    for (let i = 0; i < CREATES; i++) {
      const a = await createRunning();
      creates.push(a.ms);
      await call('DELETE', `/agents/${a.id}`);
    }
    const cs = summarize(creates);
    rows.push({ name: 'POST /agents -> GET shows running (template built)', p50Ms: cs.p50Ms, p99Ms: cs.p99Ms, target: 'p50 < 1000 ms', pass: cs.p50Ms < 1000 });

    const agent = await createRunning();
    await call('POST', `/agents/${agent.id}/try`, { text: 'warm' });
    const firstChunk: number[] = [];
    for (let i = 0; i < N; i++) {
      const m = await timedStream(`${base}/agents/${agent.id}/message`, auth, { content: `hola ${i}` }, (d) => d.includes('"type":"chunk"'));
      firstChunk.push(m.first);
    }
    const mc = summarize(firstChunk);
    rows.push({
      name: '/message: time to first chunk',
      p50Ms: mc.p50Ms,
      p99Ms: mc.p99Ms,
      overStubMs: mc.p50Ms - sf.p50Ms,
      ratio: mc.p50Ms / sf.p50Ms,
      ratioAgainst: 'stub: time to first token (direct, the baseline)',
      target: '<= stub TTFT + 25 ms (p50)',
      pass: mc.p50Ms <= sf.p50Ms + 25,
    });
    const tries: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const r = await call('POST', `/agents/${agent.id}/try`, { text: `hola ${i}` });
      if (r.status !== 200) throw new Error(`try: ${r.status}`);
      tries.push(performance.now() - t0);
    }
    const tr = summarize(tries);
    rows.push({
      name: '/try: round trip',
      p50Ms: tr.p50Ms,
      p99Ms: tr.p99Ms,
      overStubMs: tr.p50Ms - st.p50Ms,
      ratio: tr.p50Ms / st.p50Ms,
      ratioAgainst: 'stub: whole streamed answer (direct, the baseline)',
      target: '<= stub round trip + 30 ms (p50)',
      pass: tr.p50Ms <= st.p50Ms + 30,
    });
    await call('DELETE', `/agents/${agent.id}`);

    // 20 agents at once (Tera's allowance), each answering a turn at the same time.
    const t0 = performance.now();
    const fleet = await Promise.all(Array.from({ length: FLEET }, () => createRunning()));
    const allRunning = performance.now() - t0;
    const turns = await Promise.all(
      fleet.map(async (a, i) => {
        const s = performance.now();
        const r = await call('POST', `/agents/${a.id}/try`, { text: `agente ${i}` });
        return { ok: r.status === 200 && r.body.text === `echo: agente ${i}`, ms: performance.now() - s };
      }),
    );
    const answered = turns.filter((x) => x.ok).length;
    const ft = summarize(turns.map((x) => x.ms));
    rows.push({
      name: `${FLEET} agents created at once -> all running`,
      p50Ms: summarize(fleet.map((a) => a.ms)).p50Ms,
      p99Ms: summarize(fleet.map((a) => a.ms)).p99Ms,
      allRunningMs: allRunning,
    });
    rows.push({
      name: `${FLEET} agents running at once, one turn each concurrently`,
      p50Ms: ft.p50Ms,
      p99Ms: ft.p99Ms,
      answered: `${answered}/${FLEET}`,
      target: `${FLEET}/${FLEET} answer`,
      pass: answered === FLEET,
    });
    for (const a of fleet) await call('DELETE', `/agents/${a.id}`);

    // goose: create -> running against goose itself started on the host (spawn -> ACP initialize answered).
    if (existsSync(GOOSE.hostPath)) {
      await nube.services.sandboxes.core.runtime.ensureTemplate('goose');
      const warmGoose = await createRunning('goose');
      await call('DELETE', `/agents/${warmGoose.id}`);
      const direct: number[] = [];
      for (let i = 0; i < GOOSE_CREATES; i++) direct.push(await gooseInitialize());
      const gd = summarize(direct);
      rows.push({ name: 'goose acp on the host: spawn -> initialize answered (direct, the baseline)', p50Ms: gd.p50Ms, p99Ms: gd.p99Ms });
      const gooseCreates: number[] = [];
      let gooseAgent = '';
      for (let i = 0; i < GOOSE_CREATES; i++) {
        const a = await createRunning('goose');
        gooseCreates.push(a.ms);
        if (gooseAgent) await call('DELETE', `/agents/${gooseAgent}`);
        gooseAgent = a.id;
      }
      const gc = summarize(gooseCreates);
      rows.push({
        name: 'POST /agents (goose) -> GET shows running (goose template built)',
        p50Ms: gc.p50Ms,
        p99Ms: gc.p99Ms,
        ratio: gc.p50Ms / gd.p50Ms,
        ratioAgainst: 'goose acp on the host: spawn -> initialize answered (direct, the baseline)',
      });
      const s = (await call('POST', `/agents/${gooseAgent}/try`, { text: 'warm', reset: true })).body.session;
      const gooseTries: number[] = [];
      for (let i = 0; i < GOOSE_CREATES; i++) {
        const t1 = performance.now();
        const r = await call('POST', `/agents/${gooseAgent}/try`, { text: `hola ${i}`, session: s });
        if (r.status !== 200) throw new Error(`goose try: ${r.status} ${JSON.stringify(r.body)}`);
        gooseTries.push(performance.now() - t1);
      }
      const gt = summarize(gooseTries);
      rows.push({
        name: '/try round trip (goose, same session)',
        p50Ms: gt.p50Ms,
        p99Ms: gt.p99Ms,
        ratio: gt.p50Ms / st.p50Ms,
        ratioAgainst: 'stub: whole streamed answer (direct, the baseline)',
      });
      await call('DELETE', `/agents/${gooseAgent}`);
    } else {
      notes.push(`goose rows skipped: ${GOOSE.hostPath} is missing (scripts/install-goose.sh)`);
    }
    notes.push(
      `load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(' ')}; ${N} sequential samples per latency row, ${CREATES} creates`,
      'create -> running: POST /agents returns `building`; a durable job creates the sandbox (base template, already built), copies in the bundled agent program, starts it as a /bg process and nube connects and sends ACP initialize; the row polls GET every 5 ms',
      '/message and /try go nube -> ACP (TCP to the sandbox) -> agent program (Node 18 in the sandbox) -> LLM gateway (bridge address) -> stub, and back',
      'goose: create -> running includes the relay asking the gateway for the model and starting `goose acp` (the baseline row: that start alone, on the host); its /try goes nube -> relay -> goose (Rust) -> gateway -> stub; goose also asks for a session title on the first turns',
    );
  } catch (e) {
    console.error('bench agents failed:', e);
    process.exitCode = 1;
  } finally {
    const result = newResult('agents', rows, notes);
    printTable(result.rows);
    writeResult(result);
    for (const s of await nube.services.sandboxes.core.runtime.list()) await nube.services.sandboxes.core.runtime.destroy(s.id).catch(() => {});
    await nube.close();
    child.kill();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
