/**
 * Webhooks benchmark (issue target: >= 1,000 deliveries/s to a local receiver, p50 event -> delivery
 * < 50 ms, on SQLite and on PostgreSQL). nube runs in this process with its real outbox, job queue and
 * sender; the receiver runs in a child process (its own event loop) and timestamps each arrival against
 * the time carried in the event. The physical limit, measured in the same run: the same receiver hit by plain keep-alive
 * node:http POSTs of a same-sized body at the same concurrency as the delivery workers.
 * Run: `npm run bench -- webhooks [events] [--no-pg | --only-pg]`.
 */
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { sql } from 'kysely';
import { createTempDatabase } from '../test/helpers/pg.js';
import { startBenchNube } from './lib/nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';
import { now, type Receiver, startReceiver } from './lib/webhook-receiver.js';

const CONCURRENCY = 16; // the delivery job type's concurrency (src/areas/webhooks/index.ts)

const PAD = 'x'.repeat(300); // a file-object-sized payload

async function benchNube(label: string, rx: Receiver, n: number, extraEnv: Record<string, string>): Promise<ResultRow[]> {
  const { nube, key, base, close } = await startBenchNube('webhooks', extraEnv);
  if (process.env.BENCH_SYNC_NORMAL) await sql`PRAGMA synchronous = NORMAL`.execute(nube.deps.store.db);
  const auth = { authorization: `Bearer ${key}` };
  const owner = ((await (await fetch(`${base}/api/v2/account`, { headers: auth })).json()) as { id: string }).id;
  const created = await fetch(`${base}/api/v2/webhooks`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ url: `http://127.0.0.1:${rx.port}/hook`, events: ['file.created'] }),
  });
  if (created.status !== 201) throw new Error(`create webhook: ${created.status} ${await created.text()}`);
  // Through the outbox, as every event source records its events: its own commit, then the drain.
  const publish = (i: number) =>
    nube.deps.events.emit({ event: 'file.created', ownerId: owner, data: { i, sentAt: now(), pad: PAD } });
  const rows: ResultRow[] = [];
  try {
    // Warm-up: connections, JIT, statement caches.
    let wait = rx.expect(200);
    for (let i = 0; i < 200; i++) await publish(i);
    await wait;

    // Paced: latency as a receiver sees it, well below capacity (100/s) and at the target rate (1,000/s).
    for (const [rate, count] of [
      [100, 500],
      [1000, Math.min(n, 5000)],
    ] as const) {
      wait = rx.expect(count);
      const t0 = now();
      const perTick = rate / 100;
      for (let i = 0; i < count; i += perTick) {
        // The events of one tick come from concurrent requests: their commits overlap.
        const tick: Promise<void>[] = [];
        for (let j = i; j < Math.min(count, i + perTick); j++) tick.push(publish(j));
        await Promise.all(tick);
        const gap = t0 + ((i + perTick) / rate) * 1000 - now();
        if (gap > 0) await new Promise((r) => setTimeout(r, gap));
      }
      const p = await wait;
      const ps = summarize(p.latencies);
      rows.push({
        name: `nube ${label}: paced ${rate} events/s, publish -> received`,
        p50Ms: ps.p50Ms,
        p99Ms: ps.p99Ms,
        throughputPerSec: (count / (p.last - t0)) * 1000,
        target: 'p50 < 50 ms',
        pass: ps.p50Ms < 50,
        deliveries: count,
      });
    }

    wait = rx.expect(n);
    const t1 = now();
    // A backlog appears at once (recorded by 10 concurrent transactions); the rate it drains at is the throughput.
    const per = Math.ceil(n / 10);
    await Promise.all(
      Array.from({ length: 10 }, (_, k) =>
        nube.deps.events.emit(
          Array.from({ length: Math.max(0, Math.min(per, n - k * per)) }, (_, j) => ({
            event: 'file.created',
            ownerId: owner,
            data: { i: k * per + j, sentAt: now(), pad: PAD },
          })),
        ),
      ),
    );
    const b = await wait;
    const bs = summarize(b.latencies);
    rows.push({
      name: `nube ${label}: burst of ${n}, publish -> received`,
      p50Ms: bs.p50Ms,
      p99Ms: bs.p99Ms,
      throughputPerSec: (n / (b.last - t1)) * 1000,
      target: '>= 1,000 deliveries/s',
      pass: (n / (b.last - t1)) * 1000 >= 1000,
      deliveries: n,
    });
  } finally {
    await close();
  }
  return rows;
}

/** The physical limit: the same receiver, plain keep-alive POSTs, same body size and concurrency. */
async function benchBare(rx: Receiver, n: number): Promise<ResultRow> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const post = (i: number) =>
    new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ event: 'file.created', timestamp: new Date().toISOString(), data: { i, sentAt: now(), pad: PAD } });
      const req = request(
        { host: '127.0.0.1', port: rx.port, path: '/hook', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (res) => res.resume().on('end', resolve),
      );
      req.on('error', reject).end(body);
    });
  const run = async (count: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < count) await post(next++);
      }),
    );
  };
  let wait = rx.expect(200);
  await run(200);
  await wait;
  wait = rx.expect(n);
  const t0 = now();
  await run(n);
  const r = await wait;
  agent.destroy();
  const s = summarize(r.latencies);
  return {
    name: `plain node:http POSTs, ${CONCURRENCY} at once (physical limit)`,
    p50Ms: s.p50Ms,
    p99Ms: s.p99Ms,
    throughputPerSec: (n / (r.last - t0)) * 1000,
    deliveries: n,
  };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const n = Number(args.find((a) => /^\d+$/.test(a)) ?? 5000);
  const rx = await startReceiver('data.sentAt');
  const rows: ResultRow[] = [];
  try {
    const bare = await benchBare(rx, n);
    if (!args.includes('--only-pg')) rows.push(...(await benchNube('SQLite', rx, n, {})));
    if (!args.includes('--no-pg')) {
      const pg = await createTempDatabase('benchwh');
      try {
        rows.push(...(await benchNube('PostgreSQL', rx, n, { DATABASE_URL: pg.url })));
      } finally {
        await pg.drop();
      }
    }
    for (const r of rows) {
      r.ratio = (r.throughputPerSec ?? 0) / (bare.throughputPerSec ?? 1);
      r.ratioAgainst = bare.name;
    }
    rows.push(bare);
  } finally {
    rx.stop();
  }
  printTable(rows);
  const load = loadavg().map((l) => l.toFixed(1)).join(' / ');
  const notes = [
    'nube in this process (real outbox, durable job queue, delivery rows, HMAC signing, SSRF-guarded keep-alive agent); receiver in a child process, latency = arrival time minus the time carried in the event, taken just before it was recorded (same clock).',
    `Each event: its own transaction into the outbox (as an area records it with its change), the drain transaction (delivery rows + fallback job, outbox rows deleted), the first attempt inline (POST), one transaction recording the attempts of a batch, the fallback job cancelled. Beyond 256 inline attempts under way, first attempts go through the job queue (claim, POST, record, complete). Delivery job concurrency ${CONCURRENCY} (the queue's total is 20).`,
    'Paced rows record every 10 ms (1 or 10 events, a tick\'s events concurrently); their throughput is bounded by the pace, and when the pace exceeds capacity their latency is queueing time. Burst rows record the whole backlog at once (10 concurrent transactions); their throughput is the drain rate.',
    `Measured on a 2-core VM shared with other engineers' test runs (load average ${load} at the end of the run, 1/5/15 min): compare rows within one run, not across runs.`,
    'ratio = throughput / the plain POST row (same receiver, same body size, same concurrency, keep-alive).',
  ];
  console.log(`wrote ${writeResult(newResult('webhooks', rows, notes))}`);
}

await main();
