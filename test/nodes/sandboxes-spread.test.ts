import { mkdirSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT } from '../sandboxes/helpers.js';
import { type Cluster, startCluster, waitDown } from './cluster.js';

// Sandboxes on three nodes: each node has its own bridge (on this suite's subnets 10.107-109.0.0/16),
// cgroup parent, raw port range and data directory; templates are shared on disk as in the sandbox
// tests. Creates spread over the nodes, every request reaches the sandbox's node from any node.
// A WebSocket-style server inside: answers the upgrade with 101 and echoes every byte after it.
const WS_SERVER = `
const http = require('http');
const crypto = require('crypto');
// Its plain answer lists the request headers it received.
const s = http.createServer((req, res) => res.end(JSON.stringify(req.headers)));
s.on('upgrade', (req, sock) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + '\\r\\n\\r\\n');
  sock.on('data', (d) => sock.write(d));
});
s.listen(9001);
`;

function get(port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
      let body = '';
      res.on('data', (x) => (body += x));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function waitForHttp(port: number, host: string): Promise<{ status: number; body: string }> {
  for (let i = 0; i < 100; i++) {
    const r = await get(port, host);
    if (r.status === 200) return r;
    await new Promise((res) => setTimeout(res, 100));
  }
  return get(port, host);
}

describe('sandboxes over three nodes', () => {
  let c: Cluster;
  const root = join(TEST_ROOT, `nodes-${process.pid}`);
  beforeAll(async () => {
    mkdirSync(root, { recursive: true });
    c = await startCluster({
      dataRoot: root,
      env: (i) => ({
        ...SANDBOX_ENV,
        NUBE_SANDBOX_BRIDGE: `nubn${i}:10.${107 + i}.0.1/16`,
        NUBE_SANDBOX_CGROUP: `nube-nodes-${i}`,
        NUBE_RAW_PORTS: `${41000 + i * 20}-${41019 + i * 20}`,
        NUBE_LLM_GATEWAY_PORT: '0',
      }),
    });
    // The base template is built (or its build waited for) before any create, as in the sandbox tests.
    await c.nodes[0]!.nube.services.sandboxes.core.runtime.ensureTemplate('base', () => {});
    for (const n of c.nodes) await n.nube.deps.nodes.heartbeat();
    for (const n of c.nodes) await n.nube.deps.nodes.refresh();
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    if (c) {
      const list = await c.call('GET', '/sandboxes', undefined, 0);
      for (const s of list.body?.sandboxes ?? []) await c.call('DELETE', `/sandboxes/${s.id}`, undefined, 1);
      for (const n of c.nodes) {
        const rt = n.nube.services.sandboxes.core.runtime;
        for (const s of await rt.list().catch(() => [])) await rt.destroy(s.id).catch(() => {});
      }
      await c.close();
    }
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it('spreads creates over the nodes; exec and delete work from every node', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, i % 3);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.status).toBe('running');
      ids.push(r.body.id);
    }
    const rows = await c.nodes[0]!.nube.deps.store.db.selectFrom('sandboxes').select(['id', 'node_id']).where('id', 'in', ids).execute();
    const nodesUsed = new Set(rows.map((r) => r.node_id));
    expect(nodesUsed).toEqual(new Set(['node-0', 'node-1', 'node-2']));
    const nodeOf = new Map(rows.map((r) => [r.id, r.node_id]));

    for (const id of ids) {
      for (let i = 0; i < 3; i++) {
        const r = await c.call('POST', `/sandboxes/${id}/exec`, { command: 'hostname; ip -4 -o addr show eth0 | awk "{print \\$4}"' }, i);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        const [host, addr] = String(r.body.stdout).trim().split('\n');
        expect(host).toBe(id.replace('_', '-'));
        // The sandbox sits on its own node's bridge.
        const n = Number(nodeOf.get(id)!.slice(-1));
        expect(addr).toMatch(new RegExp(`^10\\.${107 + n}\\.`));
      }
    }
    for (const id of ids) expect((await c.call('DELETE', `/sandboxes/${id}`, undefined, 2)).status).toBe(200);
    const left = await c.call('GET', '/sandboxes', undefined, 1);
    expect(left.body.sandboxes).toEqual([]);
    for (const n of c.nodes) expect(await n.nube.services.sandboxes.core.runtime.list()).toEqual([]);
  }, 300_000);

  it('a cordoned node gets no new sandbox', async () => {
    await c.nodes[1]!.nube.deps.nodes.setState('node-2', 'cordoned');
    for (const n of c.nodes) await n.nube.deps.nodes.refresh();
    const ids: string[] = [];
    // (Sandbox creates are limited to 10 a minute per owner, across nodes: this file makes 10.)
    for (let i = 0; i < 2; i++) {
      const r = await c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, i % 3);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids.push(r.body.id);
    }
    const rows = await c.nodes[0]!.nube.deps.store.db.selectFrom('sandboxes').select('node_id').where('id', 'in', ids).execute();
    expect(rows.filter((r) => r.node_id === 'node-2')).toEqual([]);
    for (const id of ids) expect((await c.call('DELETE', `/sandboxes/${id}`)).status).toBe(200);
    await c.nodes[1]!.nube.deps.nodes.setState('node-2', 'active');
  }, 300_000);

  it("exposed ports on another node's sandbox: HTTP and a WebSocket upgrade pass through any node", async () => {
    const reg = c.nodes[0]!.nube.deps.nodes;
    await reg.setState('node-0', 'cordoned');
    await reg.setState('node-1', 'cordoned');
    for (const n of c.nodes) await n.nube.deps.nodes.refresh();
    const r = await c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, 0);
    await reg.setState('node-0', 'active');
    await reg.setState('node-1', 'active');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const id = r.body.id as string;
    expect(await c.nodes[0]!.nube.services.sandboxes.core.placement.nodeOf(id)).toBe('node-2');
    await c.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/www/index.html', content: '<h1>on node 2</h1>' }, 0);
    await c.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/ws.js', content: WS_SERVER }, 1);
    await c.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 -m http.server 8080 --bind 0.0.0.0', cwd: '/root/www' }, 0);
    await c.call('POST', `/sandboxes/${id}/bg`, { command: 'exec node /root/ws.js' }, 1);
    expect((await c.call('POST', `/sandboxes/${id}/expose`, { port: 8080 }, 0)).status).toBe(200);
    expect((await c.call('POST', `/sandboxes/${id}/expose`, { port: 9001 }, 1)).status).toBe(200);
    // Node 0 holds nothing of it: the port host is forwarded to node 2.
    const port0 = Number(new URL(c.nodes[0]!.baseUrl).port);
    const page = await waitForHttp(port0, `8080-${id}.sandbox.localhost:${port0}`);
    expect(page.status).toBe(200);
    expect(page.body).toContain('on node 2');
    const seen = await waitForHttp(port0, `9001-${id}.sandbox.localhost:${port0}`);
    // The relaying node's credential stops at node 2: the sandbox's server never sees it.
    expect(seen.body).toContain('x-forwarded-host');
    expect(seen.body).not.toContain('x-nube-node-token');
    const sock = await new Promise<Socket>((resolve, reject) => {
      const req = request({
        host: '127.0.0.1',
        port: port0,
        path: '/chat',
        headers: {
          host: `9001-${id}.sandbox.localhost:${port0}`,
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
          'sec-websocket-version': '13',
        },
      });
      req.on('upgrade', (res, sk) => {
        expect(res.statusCode).toBe(101);
        expect(res.headers['sec-websocket-accept']).toBe('s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
        resolve(sk);
      });
      req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on('error', reject);
      req.end();
    });
    const echoed = await new Promise<string>((resolve) => {
      sock.once('data', (d) => resolve(d.toString()));
      sock.write('ping across nodes');
    });
    expect(echoed).toBe('ping across nodes');
    sock.destroy();
    expect((await c.call('DELETE', `/sandboxes/${id}`, undefined, 0)).status).toBe(200);
  }, 300_000);

  it("a down node's sandbox shows lost with the reason; other calls answer 503; delete removes its record", async () => {
    const reg = c.nodes[0]!.nube.deps.nodes;
    await reg.setState('node-0', 'cordoned');
    await reg.setState('node-1', 'cordoned');
    for (const n of c.nodes) await n.nube.deps.nodes.refresh();
    const r = await c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, 0);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const id = r.body.id as string;
    await reg.setState('node-0', 'active');
    await reg.setState('node-1', 'active');
    expect((await c.call('POST', `/sandboxes/${id}/exec`, { command: 'true' }, 1)).status).toBe(200);

    // node-2 stops sending heartbeats (its process hangs or its host is cut off).
    c.nodes[2]!.nube.deps.nodes.stop();
    await waitDown(c, 'node-2');
    const got = await c.call('GET', `/sandboxes/${id}`, undefined, 0);
    expect(got.status).toBe(200);
    expect(got.body.status).toBe('lost');
    expect(got.body.error).toMatch(/node-2 is down: no heartbeat since/);
    const listed = await c.call('GET', '/sandboxes', undefined, 1);
    expect(listed.body.sandboxes.find((s: { id: string }) => s.id === id)?.status).toBe('lost');
    const ex = await c.call('POST', `/sandboxes/${id}/exec`, { command: 'true' }, 0);
    expect(ex.status).toBe(503);
    expect(ex.body.error).toMatch(/node-2/);
    expect((await c.call('DELETE', `/sandboxes/${id}`, undefined, 1)).status).toBe(200);
    expect((await c.call('GET', `/sandboxes/${id}`, undefined, 0)).status).toBe(404);

    // Back: its heartbeats resume; the sandbox its driver still runs has no record and goes at its next start.
    await c.nodes[2]!.nube.deps.nodes.start(c.nodes[2]!.baseUrl);
  }, 300_000);
});
