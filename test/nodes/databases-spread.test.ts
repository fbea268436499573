import { TEST_REDIS_URL } from '../helpers/redis.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callJson, startNube } from '../helpers/server.js';
import { type Cluster, startCluster, syncHeartbeats, waitDown } from './cluster.js';

// Databases on three nodes: creates are placed over all of them, and every request, whichever node it
// reaches, finds its database (forwarded to the node holding the file).
describe('databases over three nodes', () => {
  let c: Cluster;
  beforeAll(async () => {
    c = await startCluster();
  }, 60_000);
  afterAll(async () => {
    await c?.close();
  });

  it('registers each node with a heartbeat', async () => {
    const list = await c.nodes[0]!.nube.deps.nodes.list();
    expect(list.map((n) => [n.id, n.status, n.state])).toEqual([
      ['node-0', 'up', 'active'],
      ['node-1', 'up', 'active'],
      ['node-2', 'up', 'active'],
    ]);
    expect(list[0]!.cores).toBeGreaterThan(0);
    expect(list[0]!.address).toBe(c.nodes[0]!.baseUrl);
  });

  it("a replica's placement counts on the chosen node's row at once, so other replicas see it before its heartbeat", async () => {
    // No heartbeat writes a true count over the estimate while this looks (restarted after).
    for (const n of c.nodes) n.nube.deps.nodes.stop();
    try {
      await syncHeartbeats(c);
      await placeAndLook();
    } finally {
      for (const n of c.nodes) await n.nube.deps.nodes.start(n.baseUrl);
    }
  });

  async function placeAndLook() {
    const db = c.nodes[0]!.nube.deps.store.db;
    const before = await db.selectFrom('nodes').select(['id', 'databases']).execute();
    const chosen = await c.nodes[1]!.nube.deps.nodes.place({ kind: 'database' });
    const after = await db.selectFrom('nodes').select(['id', 'databases']).execute();
    for (const row of after) {
      const was = before.find((b) => b.id === row.id)!.databases;
      expect(Number(row.databases), row.id).toBe(Number(was) + (row.id === chosen ? 1 : 0));
    }
    // Another replica reading the table now counts it.
    const view = await c.nodes[2]!.nube.deps.nodes.refresh();
    expect(view.find((n) => n.id === chosen)!.databases).toBe(Number(before.find((b) => b.id === chosen)!.databases) + 1);
  }

  it('spreads creates over every node and answers each database from any node', async () => {
    const ids: string[] = [];
    const tag = Date.now().toString(36);
    for (let i = 0; i < 9; i++) {
      // Decided from current heartbeats: a loaded test machine can delay them past a whole loop.
      await syncHeartbeats(c);
      const r = await c.call('POST', '/databases', { name: `d${tag}${i}` });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      ids.push(r.body.id);
    }
    const held = await c.nodes[0]!.nube.deps.store.db.selectFrom('databases').select(['id', 'node_id']).where('id', 'in', ids).execute();
    const perNode = new Map<string, number>();
    for (const r of held) perNode.set(r.node_id!, (perNode.get(r.node_id!) ?? 0) + 1);
    expect([...perNode.keys()].sort()).toEqual(['node-0', 'node-1', 'node-2']);
    // Spread, not exact thirds: replicas decide from heartbeats a fraction of a second old.
    for (const n of perNode.values()) expect(n).toBeGreaterThanOrEqual(2);

    for (const [k, id] of ids.entries()) {
      for (let i = 0; i < 3; i++) {
        const w = await c.call('POST', `/databases/${id}/query`, { sql: 'create table if not exists t(x)' }, i);
        expect(w.status, JSON.stringify(w.body)).toBe(200);
        const ins = await c.call('POST', `/databases/${id}/query`, { sql: 'insert into t values (?)', args: [k * 10 + i] }, i);
        expect(ins.status).toBe(200);
      }
      const r = await c.call('POST', `/databases/${id}/query`, { sql: 'select x from t order by x' }, (k + 1) % 3);
      expect(r.status).toBe(200);
      expect(r.body.rows.map((row: unknown) => (Array.isArray(row) ? row[0] : (row as { x: number }).x))).toEqual([k * 10, k * 10 + 1, k * 10 + 2]);
      const got = await c.call('GET', `/databases/${id}`, undefined, k % 3);
      expect(got.status).toBe(200);
      expect(got.body.sizeBytes).toBeGreaterThan(0);
    }
    // An export streams back through the node that received it.
    const exp = await fetch(`${c.nodes[0]!.baseUrl}/api/v2/databases/${ids[1]}/export`, { headers: { authorization: `Bearer ${c.ownerKey}` } });
    expect(exp.status).toBe(200);
    expect(Buffer.from(await exp.arrayBuffer()).subarray(0, 15).toString()).toBe('SQLite format 3');
    // Deleting through any node deletes it where it lives.
    for (const [k, id] of ids.entries()) expect((await c.call('DELETE', `/databases/${id}`, undefined, (k + 2) % 3)).status).toBe(200);
    expect((await c.call('GET', '/databases')).body.items).toEqual([]);
  });

  it('MCP tool calls reach databases on every node, from any node', async () => {
    const tag = Date.now().toString(36);
    const clients: Client[] = [];
    for (const n of c.nodes) {
      const client = new Client({ name: 'nube-test', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${n.baseUrl}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${c.ownerKey}` } } }));
      clients.push(client);
    }
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await clients[i % 3]!.callTool({ name: 'databases_create', arguments: { name: `m${tag}${i}` } });
      expect(r.isError, JSON.stringify(r.structuredContent)).toBe(false);
      ids.push((r.structuredContent as { id: string }).id);
    }
    const rows = await c.nodes[0]!.nube.deps.store.db.selectFrom('databases').select('node_id').where('id', 'in', ids).execute();
    expect(new Set(rows.map((r) => r.node_id)).size).toBeGreaterThan(1);
    for (const [k, id] of ids.entries()) {
      const q = await clients[(k + 1) % 3]!.callTool({ name: 'databases_query', arguments: { dbId: id, body: { sql: 'select 40 + 2 as v' } } });
      expect(q.isError, JSON.stringify(q.structuredContent)).toBe(false);
      expect(JSON.stringify(q.structuredContent)).toContain('42');
      const d = await clients[(k + 2) % 3]!.callTool({ name: 'databases_delete', arguments: { dbId: id } });
      expect(d.isError, JSON.stringify(d.structuredContent)).toBe(false);
    }
    for (const client of clients) await client.close();
  });

  it('places nothing on a cordoned node, and a forged node credential is refused', async () => {
    expect(await c.nodes[0]!.nube.deps.nodes.setState('node-1', 'cordoned')).toBe(true);
    for (const n of c.nodes) await n.nube.deps.nodes.refresh();
    const tag = Date.now().toString(36);
    for (let i = 0; i < 6; i++) expect((await c.call('POST', '/databases', { name: `c${tag}${i}` })).status).toBe(201);
    const rows = await c.nodes[0]!.nube.deps.store.db.selectFrom('databases').select('node_id').where('name', 'like', `c${tag}%`).execute();
    expect(rows).toHaveLength(6);
    expect(rows.filter((r) => r.node_id === 'node-1')).toEqual([]);
    await c.nodes[0]!.nube.deps.nodes.setState('node-1', 'active');

    const forged = await fetch(`${c.nodes[0]!.baseUrl}/api/v2/databases`, {
      headers: { authorization: `Bearer ${c.ownerKey}`, 'x-nube-node-token': 'forged' },
    });
    expect(forged.status).toBe(401);
  });

  it('an API-only replica registers nothing and forwards every database request', async () => {
    const api = await startNube({
      dataDir: `${c.nodes[0]!.dataDir}-api`,
      env: { DATABASE_URL: c.nodes[0]!.nube.deps.config.databaseUrl!, REDIS_URL: TEST_REDIS_URL, NUBE_SECRET: 'n'.repeat(40), NUBE_OWNER_KEY: c.ownerKey, NUBE_NODE_ID: 'api-0', NUBE_NODE_ROLE: 'api' },
    });
    try {
      expect((await api.nube.deps.nodes.list()).map((n) => n.id)).not.toContain('api-0');
      const auth = { authorization: `Bearer ${c.ownerKey}` };
      const made = await callJson(api.baseUrl, 'POST', '/databases', { name: `api${Date.now().toString(36)}` }, auth);
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      const row = await api.nube.deps.store.db.selectFrom('databases').select('node_id').where('id', '=', made.body.id).executeTakeFirst();
      expect(row?.node_id).toMatch(/^node-/);
      const q = await callJson(api.baseUrl, 'POST', `/databases/${made.body.id}/query`, { sql: 'select 1 as one' }, auth);
      expect(q.status).toBe(200);
      expect((await callJson(api.baseUrl, 'DELETE', `/databases/${made.body.id}`, undefined, auth)).status).toBe(200);
    } finally {
      await api.close();
    }
  });

  it('marks a silent node down and keeps placing on the others', async () => {
    c.nodes[2]!.nube.deps.nodes.stop();
    await waitDown(c, 'node-2');
    const list = await c.nodes[0]!.nube.deps.nodes.list();
    expect(list.find((n) => n.id === 'node-2')?.status).toBe('down');
    for (let i = 0; i < 4; i++) {
      const r = await c.call('POST', '/databases', { name: `down${Date.now().toString(36)}${i}` }, 0);
      expect(r.status).toBe(201);
    }
    const rows = await c.nodes[0]!.nube.deps.store.db.selectFrom('databases').select(['name', 'node_id']).where('name', 'like', 'down%').execute();
    expect(rows.every((r) => r.node_id !== 'node-2')).toBe(true);
  });
});
