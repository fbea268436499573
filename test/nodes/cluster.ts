// Three nube nodes on one PostgreSQL and one Redis, as a many-host deployment runs them (here in one
// test process: each has its own data directory, node id, port and, with sandboxes, its own bridge,
// cgroup parent and host port ranges on the subnets this suite owns).
import { TEST_REDIS_URL } from '../helpers/redis.js';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTempDatabase } from '../helpers/pg.js';
import { callJson, newOwnerKey, startNube, type TestNube } from '../helpers/server.js';

/** A node silent this long is down. */
export const DOWN_AFTER_MS = 6000;

/** Waits until every other node sees `nodeId` down (a node that stopped its heartbeats). */
export async function waitDown(c: Cluster, nodeId: string): Promise<void> {
  const until = Date.now() + DOWN_AFTER_MS * 3;
  const others = c.nodes.filter((n) => n.nube.deps.nodes.id !== nodeId);
  for (;;) {
    // What refresh() reads is what each node then routes by (a separate list() could see it down earlier).
    const views = await Promise.all(others.map((n) => n.nube.deps.nodes.refresh()));
    if (views.every((v) => v.find((x) => x.id === nodeId)?.status === 'down') || Date.now() > until) return;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Every node beats now and every replica reads the table: placements decide from current counts. */
export async function syncHeartbeats(c: Cluster): Promise<void> {
  for (const n of c.nodes) await n.nube.deps.nodes.heartbeat();
  for (const n of c.nodes) await n.nube.deps.nodes.refresh();
}

export interface Cluster {
  nodes: TestNube[];
  ownerKey: string;
  /** A JSON call on node i (round-robin when i is omitted). */
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, i?: number): Promise<{ status: number; body: any; headers: Headers }>;
  close(): Promise<void>;
}

export async function startCluster(opts: { count?: number; env?: (i: number) => Record<string, string>; dataRoot?: string } = {}): Promise<Cluster> {
  const count = opts.count ?? 3;
  const pg = await createTempDatabase('nodes');
  const ownerKey = newOwnerKey();
  const root = opts.dataRoot ?? mkdtempSync(join(tmpdir(), 'nube-nodes-'));
  const nodes: TestNube[] = [];
  const shared = {
    DATABASE_URL: pg.url,
    REDIS_URL: TEST_REDIS_URL,
    NUBE_SECRET: 'n'.repeat(40),
    NUBE_OWNER_KEY: ownerKey,
    NUBE_RATE_LIMIT_PER_MINUTE: '100000',
    NUBE_NODE_HEARTBEAT_MS: '200',
    // Long enough that a test process stalled by the rest of the suite does not miss heartbeats.
    NUBE_NODE_DOWN_AFTER_MS: String(DOWN_AFTER_MS),
  };
  for (let i = 0; i < count; i++) {
    const dataDir = join(root, `node${i}`);
    mkdirSync(dataDir, { recursive: true });
    nodes.push(await startNube({ dataDir, env: { ...shared, NUBE_NODE_ID: `node-${i}`, ...opts.env?.(i) } }));
  }
  // Every node knows the others before the test starts.
  for (const n of nodes) await n.nube.deps.nodes.refresh();
  let rr = 0;
  return {
    nodes,
    ownerKey,
    async call(method, path, body, i) {
      const n = nodes[i ?? rr++ % nodes.length]!;
      const r = await callJson(n.baseUrl, method, path, body, { authorization: `Bearer ${ownerKey}` });
      return r;
    },
    async close() {
      for (const n of nodes) await n.close().catch(() => {});
      await pg.drop();
      if (!opts.dataRoot) rmSync(root, { recursive: true, force: true });
    },
  };
}
