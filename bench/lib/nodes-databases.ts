// Databases across nodes (issue 19 item 4), for bench/nodes.ts: three nodes in this process on one
// PostgreSQL, Redis and S3 (s3rver), no sandboxes. Measures
// - shipping lag: a write's answer -> the row names a copy that holds it (the bound on what a node's
//   death can lose), against a bare PUT of the same bytes to the same S3;
// - restore after death: the moment the other nodes see a node down -> the first answer of each of its
//   databases from another node, against a bare GET of the copy from S3;
// - drain: the write pause of each move (requests on the database wait), against a bare PUT + GET of
//   the same bytes (the two transfers the pause contains), and what a writer running through it saw.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { startS3rver } from '../../src/blob/s3rver-harness.js';
import { loadConfig } from '../../src/config.js';
import { buildServer, type Nube } from '../../src/server.js';
import type { ResultRow } from './result.js';
import { round, summarize } from './stats.js';

const SHIP_MS = 1000;
const DOWN_AFTER_MS = 2000;

export interface DbBenchOptions {
  pgUrl: string;
  ownerKey: string;
  root: string;
  /** Shipping-lag samples. */
  samples: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Rows this part writes (a `--part databases` run replaces exactly these in bench/results/nodes.json). */
export function isDatabaseRow(name: string): boolean {
  return /^(database copy lag|bare S3 |restore after death|drain write pause|writes during the drain)/.test(name);
}

export async function benchDatabaseNodes(o: DbBenchOptions): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const s3dir = mkdtempSync(`${tmpdir()}/nube-bench-dbs3-`);
  const s3 = await startS3rver(s3dir, ['nube-bench-dbs']);
  const nodes: Nube[] = [];
  const urls: string[] = [];
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 8 });
  const headers = { authorization: `Bearer ${o.ownerKey}`, 'content-type': 'application/json' };
  const call = async (i: number, method: string, path: string, body?: unknown) => {
    const r = await request(`${urls[i]}/api/v2${path}`, { method: method as 'POST', headers, body: body === undefined ? undefined : JSON.stringify(body), dispatcher: agent });
    const text = await r.body.text();
    return { status: r.statusCode, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  };
  const ok = async (i: number, method: string, path: string, body?: unknown) => {
    const r = await call(i, method, path, body);
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  try {
    for (const i of [0, 1, 2]) {
      mkdirSync(`${o.root}/db${i}`, { recursive: true });
      const nube = await buildServer(
        loadConfig({
          NUBE_DATA_DIR: `${o.root}/db${i}`,
          NUBE_PORT: '0',
          NUBE_OWNER_KEY: o.ownerKey,
          NUBE_LOG_LEVEL: process.env.BENCH_LOG ?? 'silent',
          NUBE_JOB_POLL_MS: '50',
          NUBE_SECRET: 'b'.repeat(40),
          DATABASE_URL: o.pgUrl,
          REDIS_URL: 'redis://127.0.0.1:6379',
          NUBE_RATE_LIMIT_PER_MINUTE: '10000000',
          NUBE_NODE_ID: `bench-db-${i}`,
          NUBE_NODE_HEARTBEAT_MS: '200',
          NUBE_NODE_DOWN_AFTER_MS: String(DOWN_AFTER_MS),
          NUBE_DATABASE_SHIP_MS: String(SHIP_MS),
          NUBE_BLOB_BACKEND: 's3',
          NUBE_S3_ENDPOINT: s3.endpoint,
          NUBE_S3_BUCKET: 'nube-bench-dbs',
          NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
          NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
          // No sandbox runs here; these keep to this bench's own names and subnet all the same.
          NUBE_SANDBOX_BRIDGE: `nubdb${i}:10.124.${i * 16}.1/20`,
          NUBE_SANDBOX_CGROUP: `nube-bench-dbnodes-${i}`,
          NUBE_RAW_PORTS: `${41300 + i * 20}-${41319 + i * 20}`,
          NUBE_LLM_GATEWAY_PORT: '0',
          NUBE_SSH_PORT: '0',
        }),
      );
      nodes.push(nube);
      urls.push(await nube.listen());
    }
    const ids = nodes.map((n) => n.deps.nodes.id);
    const sync = async () => {
      for (const n of nodes) await n.deps.nodes.heartbeat().catch(() => {});
      for (const n of nodes) await n.deps.nodes.refresh();
    };
    await sync();
    const db = nodes[0]!.deps.store.db;
    const rowOf = (id: string) => db.selectFrom('databases').select(['node_id', 'copy_at', 'size_bytes', 'copy_key']).where('id', '=', id).executeTakeFirstOrThrow();
    /** A database of ~1 MB (10,000 rows of ~100 bytes) on node i. */
    const makeOn = async (i: number, name: string): Promise<string> => {
      for (const [k, id] of ids.entries()) if (k !== i) await nodes[0]!.deps.nodes.setState(id, 'cordoned');
      await sync();
      const made = await ok(i, 'POST', '/databases', { name });
      for (const [k, id] of ids.entries()) if (k !== i) await nodes[0]!.deps.nodes.setState(id, 'active');
      await sync();
      const id = String(made.id);
      await ok(i, 'POST', `/databases/${id}/query`, { sql: 'create table t(x integer primary key, pad text)' });
      await ok(i, 'POST', `/databases/${id}/query`, {
        sql: "with recursive s(i) as (select 1 union all select i + 1 from s where i < 10000) insert into t select i, hex(randomblob(48)) from s",
      });
      return id;
    };
    /** When the latest copy began after `sentAt` (wall clock) and no further copy is due on its node. */
    const copiedAfter = async (id: string, sentAt: number): Promise<number> => {
      for (;;) {
        const r = await rowOf(id);
        const holder = nodes[ids.indexOf(r.node_id!)]!.services.databases.copies;
        if (Number(r.copy_at ?? 0) >= sentAt && !holder.pending(id)) return performance.now();
        await sleep(5);
      }
    };

    // --- shipping lag ---
    const made0 = Date.now();
    const shipId = await makeOn(0, 'ship');
    await copiedAfter(shipId, made0);
    const lags: number[] = [];
    for (let i = 0; i < o.samples; i++) {
      // Spread over the copy interval: some writes land just after a copy began (the worst case).
      await sleep(Math.floor(Math.random() * SHIP_MS));
      const sent = Date.now();
      await ok(0, 'POST', `/databases/${shipId}/query`, { sql: 'insert into t(pad) values (?)', args: [`w${i}`] });
      const t0 = performance.now();
      lags.push((await copiedAfter(shipId, sent)) - t0);
    }
    const copyBytes = Number((await rowOf(shipId)).size_bytes);
    const store = nodes[0]!.services.files.stores.at();
    const payload = Buffer.alloc(copyBytes, 7);
    const puts: number[] = [];
    const gets: number[] = [];
    for (let i = 0; i < Math.min(o.samples, 30); i++) {
      const t0 = performance.now();
      await store.put(`bench/bare-${i}`, Readable.from([payload]), { expectedSize: copyBytes });
      puts.push(performance.now() - t0);
      const t1 = performance.now();
      const got = await store.get(`bench/bare-${i}`);
      for await (const _ of got.stream) {
        // drain
      }
      gets.push(performance.now() - t1);
      await store.delete(`bench/bare-${i}`);
    }
    const L = summarize(lags);
    const P = summarize(puts);
    const G = summarize(gets);

    // --- drain: moves off node 2 while a writer runs on each database ---
    const drainIds: string[] = [];
    const made2 = Date.now();
    for (let i = 0; i < 6; i++) drainIds.push(await makeOn(2, `drain${i}`));
    for (const id of drainIds) await copiedAfter(id, made2);
    let stop = false;
    let acked = 0;
    let retried = 0;
    const writeLat: number[] = [];
    const writers = drainIds.map(async (id, k) => {
      for (let v = 0; !stop; v++) {
        const t0 = performance.now();
        for (;;) {
          const r = await call(k % 2, 'POST', `/databases/${id}/query`, { sql: 'insert into t(pad) values (?)', args: [`d${v}`] });
          if (r.status === 200) break;
          if (r.status !== 503) throw new Error(`write during drain: ${r.status} ${JSON.stringify(r.body)}`);
          retried++;
          await sleep(10);
        }
        writeLat.push(performance.now() - t0);
        acked++;
      }
    });
    await sleep(300);
    await nodes[2]!.deps.nodes.setState(ids[2]!, 'draining');
    await sync();
    const mover2 = nodes[2]!.services.databases.mover;
    const drainStart = performance.now();
    while ((await db.selectFrom('databases').select('id').where('node_id', '=', ids[2]!).execute()).length > 0) await mover2.tick();
    const drainMs = performance.now() - drainStart;
    stop = true;
    await Promise.all(writers);
    const pauses = [...mover2.stats.pauses];
    const phases = mover2.stats.phases;
    const med = (xs: number[]) => round(summarize(xs).p50Ms);
    const phaseNote = `Drain pause in parts (p50): requests running when it began ${med(phases.map((p) => p.runningMs))} ms, final copy (snapshot + PUT) ${med(phases.map((p) => p.copyMs))} ms, the new node's GET + install + row switch ${med(phases.map((p) => p.adoptMs))} ms.`;
    const D = summarize(pauses);
    const W = summarize(writeLat);
    await nodes[2]!.deps.nodes.setState(ids[2]!, 'active');

    // --- death: node 1 stops (no heartbeats, no copies); its databases come back on the others ---
    const deadIds: string[] = [];
    const made1 = Date.now();
    for (let i = 0; i < 4; i++) deadIds.push(await makeOn(1, `dead${i}`));
    for (const id of deadIds) await copiedAfter(id, made1);
    const dead = nodes[1]!;
    dead.deps.nodes.stop();
    await dead.services.databases.copies.stop();
    await dead.services.databases.mover.stop();
    const beat = await db.selectFrom('nodes').select('heartbeat_at').where('id', '=', ids[1]!).executeTakeFirstOrThrow();
    // The moment the others may see it down (their clocks are this process's).
    const downAt = Number(beat.heartbeat_at) + DOWN_AFTER_MS;
    const restore: number[] = [];
    // Until then it still serves them (it stops itself just before: NodeRegistry.selfUp).
    await sleep(Math.max(0, downAt - Date.now()));
    await Promise.all(
      deadIds.map(async (id, k) => {
        for (;;) {
          const r = await call(k % 2 === 0 ? 0 : 2, 'POST', `/databases/${id}/query`, { sql: 'select count(*) from t' });
          if (r.status === 200) {
            restore.push(Date.now() - downAt);
            return;
          }
          await sleep(5);
        }
      }),
    );
    const R = summarize(restore);

    const rows: ResultRow[] = [
      {
        name: `database copy lag: write answered -> copy holding it named in the row (${(copyBytes / 1e6).toFixed(1)} MB database, NUBE_DATABASE_SHIP_MS=${SHIP_MS})`,
        p50Ms: round(L.p50Ms),
        p99Ms: round(L.p99Ms),
        maxMs: round(Math.max(...lags)),
        ratio: round(L.p50Ms / P.p50Ms),
        ratioAgainst: 'bare S3 PUT of the same bytes',
        target: `what a death can lose: at most ~${SHIP_MS} ms + one copy's time`,
      },
      { name: 'bare S3 PUT of the same bytes (s3rver, loopback)', p50Ms: round(P.p50Ms), p99Ms: round(P.p99Ms) },
      { name: 'bare S3 GET of the same bytes', p50Ms: round(G.p50Ms), p99Ms: round(G.p99Ms) },
      {
        name: `restore after death: node seen down -> first answer from another node (${deadIds.length} databases)`,
        p50Ms: round(R.p50Ms),
        p99Ms: round(R.p99Ms),
        maxMs: round(Math.max(...restore)),
        ratio: round(R.p50Ms / G.p50Ms),
        ratioAgainst: 'bare S3 GET of the same bytes',
      },
      {
        name: `drain write pause per database (${pauses.length} moves)`,
        p50Ms: round(D.p50Ms),
        p99Ms: round(D.p99Ms),
        ratio: round(D.p50Ms / (P.p50Ms + G.p50Ms)),
        ratioAgainst: 'bare S3 PUT + GET of the same bytes',
        drainMs: round(drainMs),
      },
      {
        name: 'writes during the drain, as the writers saw them (incl. waits and retries)',
        p50Ms: round(W.p50Ms),
        p99Ms: round(W.p99Ms),
        maxMs: round(Math.max(...writeLat)),
        acked,
        retried503: retried,
      },
    ];
    const notes = [
      `Databases: three nodes in one process on one PostgreSQL, Redis and s3rver (a pure-JS S3 on loopback: no network between, but its own CPU on this 2-core machine), heartbeat 200 ms, down after ${DOWN_AFTER_MS} ms. Each database ~${(copyBytes / 1e6).toFixed(1)} MB.`,
      `Copy lag: ${o.samples} writes spaced at random within the copy interval; the lag is from the write's answer until the row names a copy whose snapshot began after it (polled every 5 ms). A copy is the whole file (VACUUM INTO + PUT), so its time grows with the database's size.`,
      `Restore: measured from heartbeat_at + down-after (the moment the other nodes may see the node down), so it excludes the detection time itself (NUBE_NODE_DOWN_AFTER_MS); a restorer pass runs every heartbeat.`,
      phaseNote,
      `Drain: ${drainIds.length} databases, each with a writer alternating between two nodes; the pause is from the gate closing to the requests released to the new node (final copy PUT, the new node's GET and install, the row switch); writers saw ${retried} 503s (retried), the rest waited.`,
    ];
    return { rows, notes };
  } finally {
    for (const n of nodes) await n.close().catch(() => {});
    await agent.close();
    await s3.stop();
    rmSync(s3dir, { recursive: true, force: true });
  }
}
