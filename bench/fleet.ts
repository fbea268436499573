// Fleet benchmark: `npm run bench -- fleet`. A real nube (in this process, SQLite, namespaces driver)
// whose LLM upstream is the OpenAI-protocol stub in a child process answering after BENCH_FLEET_LLM_MS.
// Baselines measured in the same run: the stub's own round trip (the floor of any turn) and the
// conversation store's query called in process (the floor of GET /messages). Rows: a conversation's next turn on
// its own box, a new conversation on a spare and at capacity (a box built for it); 100 conversations at once on a fleet capped at 10 boxes (clients retry after each 503's
// retryAfter: no turn may be lost, every retryAfter must have been enough); GET /messages with 10,000
// messages in the conversation. Writes bench/results/fleet.json.
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { FleetRepo } from '../src/areas/fleet/repo.js';
import { defaultReply, startLlmStub } from '../test/helpers/llm-stub.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';
import { startSandboxNube } from './lib/sandbox-nube.js';

const LLM_MS = Number(process.env.BENCH_FLEET_LLM_MS ?? 200);
const N = Number(process.env.BENCH_FLEET_N ?? 30);
const CONVERSATIONS = 100;
const BOXES = 10;
const MESSAGES = 10_000;
const READS = Number(process.env.BENCH_FLEET_READS ?? 500);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

if (process.argv[2] === 'stub') {
  const stub = await startLlmStub();
  stub.respond = (req) => ({ ...defaultReply(req), delayMs: LLM_MS });
  process.send?.({ url: stub.url });
} else {
  await main();
}


async function main() {
  const child = fork(fileURLToPath(import.meta.url), ['stub'], { execArgv: ['--import', 'tsx'] });
  const stubUrl = await new Promise<string>((resolve) => child.once('message', (m: { url: string }) => resolve(m.url)));
  const { nube, key, dataDir, baseUrl } = await startSandboxNube('fleet', 'nubeb1:10.80.0.1/16', {
    NUBE_LLM_BASE_URL: stubUrl,
    NUBE_LLM_GATEWAY_PORT: '0',
    NUBE_RATE_LIMIT_PER_MINUTE: '1000000',
    NUBE_FLEET_IDLE_SECONDS: '3600',
  });
  const base = `${baseUrl}/api/v2`;
  const call = async (method: string, path: string, body?: unknown, token = key) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    // biome-ignore lint/suspicious/noExplicitAny: bench reads arbitrary JSON
    return { status: r.status, body: (await r.json()) as any };
  };
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  try {
    // The stub's own round trip: what every turn pays at least.
    const direct: number[] = [];
    for (let i = 0; i < N; i++) {
      const t0 = performance.now();
      const r = await fetch(`${stubUrl}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ stream: true, messages: [{ role: 'user', content: `hola ${i}` }] }) });
      await r.text();
      direct.push(performance.now() - t0);
    }
    const st = summarize(direct);
    const STUB = 'stub: whole streamed answer (direct, the baseline)';
    rows.push({ name: STUB, p50Ms: st.p50Ms, p99Ms: st.p99Ms });

    // A box serves one conversation for its whole life: a conversation's next turn runs on its own box
    // (the warm path); a new conversation takes a spare built ahead, or, at capacity, the idlest box is
    // destroyed and a new one built for it.
    const allRunning = async () => {
      for (let i = 0; i < 1200; i++) {
        const agents = (await call('GET', '/agents')).body.agents as { status: string }[];
        if (agents.every((a) => a.status === 'running')) return;
        await sleep(50);
      }
      throw new Error('the fleet boxes did not finish building in 60 s');
    };
    const one = (await call('POST', '/fleet-agents', { name: 'uno', capacity: 12 })).body;
    const g1 = `web-${randomUUID()}`;
    const warm = await call('POST', `/fleet-agents/${one.id}/message`, { groupId: g1, text: 'calentar' }, one.token);
    if (warm.status !== 200) throw new Error(`warm-up turn answered ${warm.status}: ${JSON.stringify(warm.body)}`);
    const timeTurns = async (n: number, fleet: { id: string; token: string }, group: () => string, before?: () => Promise<void>) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        await before?.();
        const t0 = performance.now();
        const r = await call('POST', `/fleet-agents/${fleet.id}/message`, { groupId: group(), text: `hola ${i}` }, fleet.token);
        if (r.status !== 200) throw new Error(`turn answered ${r.status}: ${JSON.stringify(r.body)}`);
        out.push(performance.now() - t0);
      }
      return summarize(out);
    };
    const turnRow = (name: string, x: { p50Ms: number; p99Ms: number }) =>
      rows.push({ name, p50Ms: x.p50Ms, p99Ms: x.p99Ms, overStubMs: x.p50Ms - st.p50Ms, ratio: x.p50Ms / st.p50Ms, ratioAgainst: STUB });
    turnRow("POST /message: a conversation's next turn, on its own box", await timeTurns(N, one, () => g1));
    const NEW = Math.min(N, 10);
    // The spare (built while nothing else runs) is taken by the new conversation, and the next one built.
    turnRow('POST /message: a new conversation, on a spare box built ahead', await timeTurns(NEW, one, () => `web-${randomUUID()}`, allRunning));
    await call('DELETE', `/fleet-agents/${one.id}`);
    const full = (await call('POST', '/fleet-agents', { name: 'lleno', capacity: 1 })).body;
    await call('POST', `/fleet-agents/${full.id}/message`, { groupId: `web-${randomUUID()}`, text: 'calentar' }, full.token);
    turnRow(
      'POST /message: a new conversation at capacity (the idlest box destroyed, a new one built)',
      await timeTurns(NEW, full, () => `web-${randomUUID()}`, allRunning),
    );
    await call('DELETE', `/fleet-agents/${full.id}`);

    // 100 conversations at once on a fleet capped at 10 boxes (built on demand, from none).
    const fa = (await call('POST', '/fleet-agents', { name: 'cien', capacity: BOXES })).body;
    let refused = 0;
    let enough = 0;
    let notEnough = 0;
    const t0 = performance.now();
    const results = await Promise.all(
      Array.from({ length: CONVERSATIONS }, async (_, i) => {
        const groupId = `web-${randomUUID()}`;
        const s = performance.now();
        let after503 = false;
        for (let attempt = 0; attempt < 50; attempt++) {
          const r = await call('POST', `/fleet-agents/${fa.id}/message`, { groupId, text: `conversación ${i}` }, fa.token);
          if (after503) {
            if (r.status === 503) notEnough++;
            else enough++;
          }
          if (r.status === 503) {
            refused++;
            after503 = true;
            await sleep(Number(r.body.retryAfter) * 1000);
            continue;
          }
          return { ok: r.status === 200 && r.body.reply === `echo: conversación ${i}`, ms: performance.now() - s, turnId: r.body.turnId as string };
        }
        return { ok: false, ms: performance.now() - s, turnId: '' };
      }),
    );
    const wall = performance.now() - t0;
    const answered = results.filter((r) => r.ok).length;
    const rowsDb = await nube.deps.store.db
      .selectFrom('fleet_turns')
      .select(['created_at', 'started_at', 'status', 'error_code', 'error_message'])
      .where('fleet_agent_id', '=', fa.id)
      .execute();
    for (const r of rowsDb.filter((x) => x.status !== 'completed')) notes.push(`turn not completed: ${r.status} ${r.error_code}: ${r.error_message}`);
    const queueing = summarize(rowsDb.map((r) => Number(r.started_at) - Number(r.created_at)));
    const e2e = summarize(results.map((r) => r.ms));
    const failed = rowsDb.filter((r) => r.status !== 'completed').length;
    rows.push({
      name: `${CONVERSATIONS} conversations at once, fleet capped at ${BOXES} boxes: admitted turn queueing delay`,
      p50Ms: queueing.p50Ms,
      p99Ms: queueing.p99Ms,
      answered: `${answered}/${CONVERSATIONS}`,
      lost: CONVERSATIONS - answered,
      turnsNotCompleted: failed,
      refused503: refused,
      retryAfterEnough: `${enough}/${enough + notEnough}`,
      target: 'no turn lost; every retryAfter enough',
      pass: answered === CONVERSATIONS && notEnough === 0,
    });
    rows.push({
      name: `${CONVERSATIONS} conversations at once: client time to reply (503 waits included)`,
      p50Ms: e2e.p50Ms,
      p99Ms: e2e.p99Ms,
      wallMs: wall,
      throughputPerSec: (CONVERSATIONS / wall) * 1000,
      idealWallMs: Math.ceil(CONVERSATIONS / BOXES) * st.p50Ms,
      ratio: wall / (Math.ceil(CONVERSATIONS / BOXES) * st.p50Ms),
      ratioAgainst: `${Math.ceil(CONVERSATIONS / BOXES)} rounds of the stub's round trip on ${BOXES} boxes`,
    });
    const stats = nube.services.fleet.pools.stats(fa.id);
    notes.push(`after the 100 conversations the pool held ${stats.boxes} boxes (measured turn ${stats.avgTurnMs} ms)`);

    // GET /messages with 10,000 messages in one conversation (written through the store directly).
    const repo = new FleetRepo(nube.deps.store.db);
    const gBig = `web-${randomUUID()}`;
    await call('POST', `/fleet-agents/${fa.id}/message`, { groupId: gBig, text: 'inicio' }, fa.token);
    for (let done = 2; done < MESSAGES; done += 500) {
      const batch = Array.from({ length: Math.min(500, MESSAGES - done) }, (_, j) => ({
        id: `msg_b${done + j}`,
        role: (j % 2 ? 'assistant' : 'user') as 'user' | 'assistant',
        text: `mensaje número ${done + j} de la conversación larga`,
        turn_id: null,
        created_at: Date.now(),
      }));
      await repo.append(fa.id, gBig, batch);
    }
    const head = await call('GET', `/fleet-agents/${fa.id}/messages?groupId=${gBig}&limit=1`, undefined, fa.token);
    const conv = await repo.conversation(fa.id, gBig);
    const lastSeq = conv!.last_seq;
    const nearEnd = encodeURIComponent(nube.services.fleet.signer.cursor(fa.id, gBig, lastSeq - 50));
    const reads: number[] = [];
    const firstPage: number[] = [];
    const floor: number[] = [];
    const origin = base.replace(/\/api\/v2$/, '');
    for (let i = 0; i < READS; i++) {
      let s = performance.now();
      await (await fetch(`${origin}/healthz`)).text();
      floor.push(performance.now() - s);
      s = performance.now();
      const r = await fetch(`${base}/fleet-agents/${fa.id}/messages?groupId=${gBig}&since=${nearEnd}&limit=50`, { headers: { authorization: `Bearer ${fa.token}` } });
      await r.text();
      reads.push(performance.now() - s);
      s = performance.now();
      const f = await fetch(`${base}/fleet-agents/${fa.id}/messages?groupId=${gBig}&limit=50`, { headers: { authorization: `Bearer ${fa.token}` } });
      await f.text();
      firstPage.push(performance.now() - s);
    }
    const inproc: number[] = [];
    for (let i = 0; i < READS; i++) {
      const s = performance.now();
      await repo.conversation(fa.id, gBig);
      await repo.messages(fa.id, gBig, lastSeq - 50, 51);
      inproc.push(performance.now() - s);
    }
    const rd = summarize(reads);
    const fp = summarize(firstPage);
    const ip = summarize(inproc);
    const STORE = 'conversation store query in process (the baseline)';
    const HTTP = 'GET /healthz over HTTP, same loop (the HTTP floor)';
    const hf = summarize(floor);
    rows.push({ name: STORE, p50Ms: ip.p50Ms, p99Ms: ip.p99Ms });
    rows.push({ name: HTTP, p50Ms: hf.p50Ms, p99Ms: hf.p99Ms });
    rows.push({
      name: `GET /messages since a cursor near the end, limit 50 (${MESSAGES} messages)`,
      p50Ms: rd.p50Ms,
      p99Ms: rd.p99Ms,
      ratio: rd.p50Ms / hf.p50Ms,
      ratioAgainst: HTTP,
      overFloorMs: rd.p50Ms - hf.p50Ms,
      target: 'p50 < 5 ms',
      pass: rd.p50Ms < 5,
    });
    rows.push({ name: `GET /messages first page, limit 50 (${MESSAGES} messages)`, p50Ms: fp.p50Ms, p99Ms: fp.p99Ms, target: 'p50 < 5 ms', pass: fp.p50Ms < 5 });
    notes.push(
      `load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(' ')}; the stub answers after ${LLM_MS} ms; ${N} sequential samples per turn row, ${READS} per read row; the long conversation answered ${head.status}`,
      `fleet: one conversation per box, NUBE_FLEET_SPARE_BOXES=1 and NUBE_FLEET_QUEUE_FACTOR=1 (defaults): 10 turns run (each new conversation in a box of its own: at capacity the idlest box is destroyed and a new one built) and 10 wait, the rest get 503 FleetFull with retryAfter; each client sleeps retryAfter and retries (a retry answered 503 again counts as a retryAfter not enough)`,
      'a turn goes nube -> ACP (TCP to the box sandbox) -> agent program -> LLM gateway -> stub and back, then the transcript and the turn event are written',
    );
  } catch (e) {
    console.error('bench fleet failed:', e);
    process.exitCode = 1;
  } finally {
    const result = newResult('fleet', rows, notes);
    printTable(result.rows);
    writeResult(result);
    for (const s of await nube.services.sandboxes.core.runtime.list()) await nube.services.sandboxes.core.runtime.destroy(s.id).catch(() => {});
    await nube.close();
    child.kill();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

