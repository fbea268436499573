// Three nube nodes as three operating-system processes on this machine, as a many-host deployment runs
// them: each its own data directory, node id, port, sandbox bridge (this suite's subnets
// 10.125-127.0.0.0/16), cgroup parent, raw port range and SSH port; all on one temporary PostgreSQL
// database, the shared Redis and one s3rver for file bytes, with the same NUBE_SECRET and owner key,
// and short heartbeat and down times. A client spreads its requests over the live nodes, one node
// after the other per request, as a load balancer would; `kill(i)` sends SIGKILL and takes the node
// out of the rotation (a load balancer's health check).
import { TEST_REDIS_URL } from '../helpers/redis.js';
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startS3rver } from '../../src/blob/s3rver-harness.js';
import { createTempDatabase } from '../helpers/pg.js';
import { exited, freePort, spawnNube } from '../helpers/process.js';
import { callJson, type JsonCaller, newOwnerKey } from '../helpers/server.js';
import { SANDBOX_ENV, TEST_ROOT } from '../sandboxes/helpers.js';

/** Each node beats (and then reads the nodes table) this often. */
export const HEARTBEAT_MS = 500;
/** A node silent this long is down (long enough that a loaded machine does not miss heartbeats). */
export const PROC_DOWN_AFTER_MS = 6000;
/** Webhook attempts time out after this; their job lease is 20 s longer (src/areas/webhooks/index.ts). */
export const PROC_WEBHOOK_TIMEOUT_MS = 8000;

/**
 * A cluster's client in the shape test bodies take from a `TestNube`: the owner's key, JSON calls, and
 * a base URL that names the next node each time it is read (a helper reads it once per request).
 */
export interface ApiTarget extends JsonCaller {
  ownerKey: string;
  auth: { authorization: string };
  readonly baseUrl: string;
}

export interface ProcNode {
  id: string;
  index: number;
  baseUrl: string;
  port: number;
  dataDir: string;
  child: ChildProcess;
  alive: boolean;
  env: Record<string, string>;
}

export interface ProcCluster {
  nodes: ProcNode[];
  ownerKey: string;
  /** Spreads requests over the live nodes, round-robin per request. */
  client: ApiTarget;
  /** A client that always calls node i. */
  on(i: number): ApiTarget;
  /** The shared metadata database, for assertions (which node holds what, job leases). */
  sql<T extends object>(text: string, values?: unknown[]): Promise<T[]>;
  /** The node holding a sandbox or database (from its row). */
  nodeOf(table: 'sandboxes' | 'databases', id: string): Promise<string | null>;
  /** SIGKILL to node i; waits for its exit; the client stops sending it requests. */
  kill(i: number): Promise<void>;
  /** Starts node i again on its data directory (its reconcile destroys what it holds without a record). */
  restart(i: number): Promise<void>;
  /** Waits until node i shows `down` in the nodes table (its heartbeat older than the down time). */
  waitDown(i: number): Promise<void>;
  close(): Promise<void>;
}

function target(ownerKey: string, next: () => string): ApiTarget {
  const auth = { authorization: `Bearer ${ownerKey}` };
  return {
    ownerKey,
    auth,
    get baseUrl() {
      return next();
    },
    call: (method, path, body, headers = {}) => callJson(next(), method, path, body, { ...auth, ...headers }),
  };
}

export async function startProcessCluster(opts: { env?: Record<string, string> } = {}): Promise<ProcCluster> {
  const pgdb = await createTempDatabase('procs');
  const s3dir = mkdtempSync(join(tmpdir(), 'nube-procs-s3-'));
  const s3 = await startS3rver(s3dir, ['nube-procs']);
  const root = join(TEST_ROOT, `procs-${process.pid}`);
  const ownerKey = newOwnerKey();
  const meta = new pg.Pool({ connectionString: pgdb.url, max: 2 });
  const shared: Record<string, string> = {
    ...SANDBOX_ENV,
    NUBE_HOST: '127.0.0.1',
    NUBE_LOG_LEVEL: process.env.NUBE_TEST_NODE_LOG ?? 'warn',
    NUBE_JOB_POLL_MS: '50',
    DATABASE_URL: pgdb.url,
    REDIS_URL: TEST_REDIS_URL,
    NUBE_SECRET: 'p'.repeat(40),
    NUBE_OWNER_KEY: ownerKey,
    NUBE_RATE_LIMIT_PER_MINUTE: '100000',
    NUBE_NODE_HEARTBEAT_MS: String(HEARTBEAT_MS),
    NUBE_NODE_DOWN_AFTER_MS: String(PROC_DOWN_AFTER_MS),
    NUBE_BLOB_BACKEND: 's3',
    NUBE_S3_ENDPOINT: s3.endpoint,
    NUBE_S3_BUCKET: 'nube-procs',
    NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    NUBE_LLM_GATEWAY_PORT: '0',
    // Webhooks may reach the test's receiver on loopback, and retry fast.
    NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
    NUBE_WEBHOOK_RETRY_SCHEDULE: '200ms,200ms,200ms,200ms,200ms',
    NUBE_WEBHOOK_TIMEOUT_MS: String(PROC_WEBHOOK_TIMEOUT_MS),
    ...opts.env,
  };
  const nodes: ProcNode[] = [];
  const start = async (i: number) => {
    const port = await freePort();
    const dataDir = join(root, `node${i}`);
    mkdirSync(dataDir, { recursive: true });
    const baseUrl = `http://127.0.0.1:${port}`;
    const env = {
      ...shared,
      NUBE_DATA_DIR: dataDir,
      NUBE_PORT: String(port),
      NUBE_NODE_ID: `proc-${i}`,
      NUBE_SANDBOX_BRIDGE: `nubp${i}:10.${125 + i}.0.1/16`,
      NUBE_SANDBOX_CGROUP: `nube-procs-${i}`,
      NUBE_RAW_PORTS: `${41300 + i * 20}-${41319 + i * 20}`,
    };
    // Under a loaded machine tsx compiles the whole server per process: minutes are possible.
    const child = await spawnNube(env, baseUrl, { startMs: 300_000 });
    nodes[i] = { id: `proc-${i}`, index: i, baseUrl, port, dataDir, child, alive: true, env };
  };
  const stopAll = async () => {
    for (const n of nodes.filter(Boolean)) {
      if (n.child.exitCode === null && n.child.signalCode === null) {
        n.child.kill('SIGTERM');
        const t = setTimeout(() => n.child.kill('SIGKILL'), 30_000);
        await exited(n.child);
        clearTimeout(t);
      }
    }
  };
  // A test process that dies (a timeout, ^C) takes its nodes with it rather than leaving them running.
  const orphans = () => {
    for (const n of nodes.filter(Boolean)) if (n.child.exitCode === null) n.child.kill('SIGKILL');
  };
  process.once('exit', orphans);
  const sql = async <T extends object>(text: string, values: unknown[] = []) => (await meta.query(text, values)).rows as T[];
  try {
    // The first node creates the schema and the owner account; the other two start together after it.
    await start(0);
    await Promise.all([start(1), start(2)]);
    // Every node has beaten and each has read the others (a refresh follows each heartbeat).
    const until = Date.now() + 60_000;
    for (;;) {
      const up = await sql<{ id: string }>('SELECT id FROM nodes WHERE heartbeat_at > $1', [Date.now() - PROC_DOWN_AFTER_MS]);
      if (up.length === 3 || Date.now() > until) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 1200));
  } catch (e) {
    await stopAll();
    throw e;
  }
  let rr = 0;
  const live = () => {
    const alive = nodes.filter((n) => n.alive);
    return alive[rr++ % alive.length]!.baseUrl;
  };
  return {
    nodes,
    ownerKey,
    client: target(ownerKey, live),
    on: (i) => target(ownerKey, () => nodes[i]!.baseUrl),
    sql,
    async nodeOf(table, id) {
      const [row] = await sql<{ node_id: string | null }>(`SELECT node_id FROM ${table} WHERE id = $1`, [id]);
      return row?.node_id ?? null;
    },
    async kill(i) {
      const n = nodes[i]!;
      n.alive = false;
      n.child.kill('SIGKILL');
      await exited(n.child);
    },
    async restart(i) {
      const n = nodes[i]!;
      if (n.alive) throw new Error(`node ${n.id} is running`);
      n.child = await spawnNube(n.env, n.baseUrl, { startMs: 300_000 });
      n.alive = true;
    },
    async waitDown(i) {
      const end = Date.now() + PROC_DOWN_AFTER_MS * 5;
      for (;;) {
        const [row] = await sql<{ heartbeat_at: string }>('SELECT heartbeat_at FROM nodes WHERE id = $1', [nodes[i]!.id]);
        // Past the down time by a heartbeat: every node's next refresh sees it down.
        if (Date.now() - Number(row?.heartbeat_at) > PROC_DOWN_AFTER_MS + 1000) return;
        if (Date.now() > end) throw new Error(`node ${nodes[i]!.id} still beats`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    async close() {
      process.off('exit', orphans);
      await stopAll();
      await meta.end();
      await s3.stop();
      await pgdb.drop();
      rmSync(s3dir, { recursive: true, force: true });
      rmSync(root, { recursive: true, force: true });
    },
  };
}
