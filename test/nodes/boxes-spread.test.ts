import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sseMessage, textOf } from '../agents/helpers.js';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { callJson } from '../helpers/server.js';
import { waitServing } from '../machines/helpers.js';
import { type SourceServer, startSourceServer, tarGz } from '../machines/source-server.js';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT } from '../sandboxes/helpers.js';
import { startDns, type TestDns } from '../domains/dns.js';
import { type Cluster, startCluster, syncHeartbeats, waitDown } from './cluster.js';

// Machines and agents over three nodes (bridges on this file's subnets 10.128-130.0.0/16): each lands
// with its sandbox on the node the scheduler picks, its jobs (launch, build) run there, and every
// request for it reaches that node from any node. Node 2 is the only active node while one is created,
// so it lands there; the calls then go through nodes 0 and 1.

/** Cordons every node but `id`, runs `fn`, then makes them active again. */
async function onlyOn<T>(c: Cluster, id: string, fn: () => Promise<T>): Promise<T> {
  const reg = c.nodes[0]!.nube.deps.nodes;
  const others = c.nodes.map((n) => n.nube.deps.nodes.id).filter((x) => x !== id);
  for (const o of others) await reg.setState(o, 'cordoned');
  await syncHeartbeats(c);
  try {
    return await fn();
  } finally {
    for (const o of others) await reg.setState(o, 'active');
    await syncHeartbeats(c);
  }
}

const APP = {
  'package.json': JSON.stringify({ name: 'app', version: '1.0.0', scripts: { start: 'node server.js', build: 'echo building-on-a-node' } }),
  'server.js': `console.log('app nodes booting');\nrequire('http').createServer((q, s) => s.end('hello nodes')).listen(Number(process.env.PORT), '0.0.0.0');\n`,
};

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
function callJsonAs(c: Cluster, i: number, method: string, path: string, body: unknown, key: string): Promise<{ status: number; body: any }> {
  return callJson(c.nodes[i]!.baseUrl, method, path, body, { authorization: `Bearer ${key}` });
}

/** The real OpenSSH client with a ticket's password (askpass), as test/sandboxes/ssh.test.ts runs it. */
function openSsh(askpass: string, host: string, port: number, user: string, password: string, cmd: string, input = ''): Promise<{ code: number; stdout: string; stderr: string }> {
  const opts = ['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'PreferredAuthentications=password', '-o', 'PubkeyAuthentication=no', '-o', 'NumberOfPasswordPrompts=1', '-o', 'ConnectTimeout=20', '-o', 'LogLevel=ERROR'];
  return new Promise((resolve) => {
    const c = spawn('ssh', [...opts, '-p', String(port), `${user}@${host}`, cmd], {
      env: { ...process.env, SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: 'force', DISPLAY: ':0', NUBE_TEST_PW: password },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    c.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    c.stdin.end(input);
  });
}

describe('machines and agents over three nodes', () => {
  let c: Cluster;
  let stub: LlmStub;
  let src: SourceServer;
  let dns: TestDns;
  const DOMAIN = 'app.nodes-test.example';
  const root = join(TEST_ROOT, `nodes-boxes-${process.pid}`);
  let machineId = '';
  let agentId = '';

  beforeAll(async () => {
    mkdirSync(root, { recursive: true });
    stub = await startLlmStub();
    src = await startSourceServer();
    dns = await startDns();
    src.put('/app.tar.gz', tarGz(APP));
    c = await startCluster({
      dataRoot: root,
      env: (i) => ({
        ...SANDBOX_ENV,
        NUBE_SANDBOX_BRIDGE: `nubb${i}:10.${128 + i}.0.1/16`,
        NUBE_SANDBOX_CGROUP: `nube-boxes-${i}`,
        NUBE_RAW_PORTS: `${41200 + i * 20}-${41219 + i * 20}`,
        NUBE_LLM_BASE_URL: stub.url,
        NUBE_LLM_API_KEY: 'sk-operator',
        NUBE_LLM_MODEL: 'stub-model',
        NUBE_LLM_GATEWAY_PORT: '0',
        NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
        NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}`,
      }),
    });
    await c.nodes[0]!.nube.services.sandboxes.core.runtime.ensureTemplate('base', () => {});
    await syncHeartbeats(c);
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (c) {
      for (const a of (await c.call('GET', '/agents', undefined, 0)).body?.agents ?? []) await c.call('DELETE', `/agents/${a.id}`, undefined, 1);
      for (const m of (await c.call('GET', '/machines', undefined, 0)).body?.machines ?? []) await c.call('DELETE', `/machines/${m.id}`, undefined, 1);
      for (const n of c.nodes) {
        const rt = n.nube.services.sandboxes.core.runtime;
        for (const s of await rt.list().catch(() => [])) await rt.destroy(s.id).catch(() => {});
      }
      await c.close();
    }
    await src?.close();
    dns?.close();
    await stub?.close();
    rmSync(root, { recursive: true, force: true });
  }, 180_000);

  it('a machine launched through node 1 lands on node 2; its launch job runs there; logs, restart and its URL work through node 0', async () => {
    const r = await onlyOn(c, 'node-2', () => c.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, name: 'on-two' }, 1));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.status, JSON.stringify(r.body)).toBe('running');
    machineId = r.body.machineId;
    const db = c.nodes[0]!.nube.deps.store.db;
    const row = await db.selectFrom('machines').select(['node_id', 'sandbox_id']).where('id', '=', machineId).executeTakeFirstOrThrow();
    expect(row.node_id).toBe('node-2');
    expect(await c.nodes[0]!.nube.services.sandboxes.nodeOf(row.sandbox_id)).toBe('node-2');
    // The backup timer is node 2's job type: no other node leases it.
    const timers = await db.selectFrom('jobs').select('type').where('key', '=', `machine-backup:${machineId}`).execute();
    expect(timers.map((t) => t.type)).toEqual(['machines.backup@node-2']);

    const got = await c.call('GET', `/machines/${machineId}`, undefined, 0);
    expect(got.body).toMatchObject({ status: 'running', name: 'on-two' });
    await waitServing(c.nodes[0]!, r.body.url, (b) => b === 'hello nodes');
    const logs = await c.call('GET', `/machines/${machineId}/logs?lines=200`, undefined, 0);
    expect(logs.status, JSON.stringify(logs.body)).toBe(200);
    expect(logs.body.lines.join('\n')).toContain('app nodes booting');
    const restarted = await c.call('POST', `/machines/${machineId}/restart`, {}, 0);
    expect(restarted.status, JSON.stringify(restarted.body)).toBe(200);
    await waitServing(c.nodes[1]!, r.body.url, (b) => b === 'hello nodes');
    // A redeploy through node 0 names the machine by its sandbox: relayed to node 2 before the fetch.
    const again = await c.call('POST', '/machines/launch', { sandboxId: r.body.sandboxId, archiveUrl: `${src.base}/app.tar.gz`, domain: DOMAIN }, 0);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.status).toBe('running');
    // Its custom domain, verified, reaches the app through a node that does not hold it.
    const d = await c.call('GET', `/domains/${DOMAIN}`, undefined, 1);
    const txt = d.body.records.find((x: { type: string }) => x.type === 'TXT');
    dns.txt.set(txt.name, [txt.value]);
    const v = await c.call('POST', `/domains/${DOMAIN}/verify`, {}, 1);
    expect(v.body.verified, JSON.stringify(v.body)).toBe(true);
    for (const i of [0, 1]) await waitServing(c.nodes[i]!, `http://${DOMAIN}/`, (b) => b === 'hello nodes');
  }, 400_000);

  it('an agent created through node 0 lands on node 2: built there, messages through any node', async () => {
    const r = await onlyOn(c, 'node-2', () => c.call('POST', '/agents', { template: 'acp', env: {} }, 0));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    agentId = r.body.id;
    const db = c.nodes[0]!.nube.deps.store.db;
    expect((await db.selectFrom('agents').select('node_id').where('id', '=', agentId).executeTakeFirstOrThrow()).node_id).toBe('node-2');
    let status = '';
    for (let i = 0; i < 1200 && status !== 'running'; i++) {
      const g = await c.call('GET', `/agents/${agentId}`, undefined, i % 3);
      status = g.body.status;
      if (status === 'lost') throw new Error(`agent build failed: ${g.body.error}`);
      if (status !== 'running') await new Promise((res) => setTimeout(res, 100));
    }
    expect(status).toBe('running');
    const sandboxId = (await c.call('GET', `/agents/${agentId}`, undefined, 1)).body.sandboxId;
    expect(await c.nodes[1]!.nube.services.sandboxes.nodeOf(sandboxId)).toBe('node-2');
    for (const i of [0, 1]) {
      const m = await sseMessage(c.nodes[i]!.baseUrl, c.ownerKey, agentId, `hola desde ${i}`);
      expect(m.status, JSON.stringify(m.events)).toBe(200);
      expect(textOf(m.events)).toBe(`echo: hola desde ${i}`);
    }
    const turns = await c.call('GET', `/agents/${agentId}/turns`, undefined, 0);
    expect(turns.status).toBe(200);
  }, 400_000);

  it('a create from a derived template held by node 2 goes to node 2 from any node; 503 while node 2 is cordoned', async () => {
    const src0 = await onlyOn(c, 'node-2', () => c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, 0));
    expect(src0.status, JSON.stringify(src0.body)).toBe(200);
    await c.call('POST', `/sandboxes/${src0.body.id}/exec`, { command: 'echo baked > /root/baked.txt' }, 1);
    const tpl = await c.call('POST', `/sandboxes/${src0.body.id}/template-snapshot`, { key: 'nodes-test', hash: 'h1' }, 0);
    expect(tpl.status, JSON.stringify(tpl.body)).toBe(200);
    // What a copy through S3 would have to move (affinity moves nothing): docs/decisions.md.
    console.log(`[nodes] derived template snapshot: ${tpl.body.sizeBytes} bytes`);
    const db = c.nodes[0]!.nube.deps.store.db;
    expect((await db.selectFrom('sandbox_templates').select('node_id').where('id', '=', tpl.body.id).executeTakeFirstOrThrow()).node_id).toBe('node-2');
    // Read and described by its node (staleness is that node's build of the base template).
    const got = await c.call('GET', `/template-snapshots/${tpl.body.id}`, undefined, 1);
    expect(got.body).toMatchObject({ id: tpl.body.id, stale: false });
    const ids: string[] = [];
    for (const i of [0, 1]) {
      const r = await c.call('POST', '/sandboxes', { timeoutSeconds: 300, templateKey: 'nodes-test', templateHash: 'h1' }, i);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids.push(r.body.id);
      expect(await c.nodes[i]!.nube.services.sandboxes.nodeOf(r.body.id)).toBe('node-2');
      const out = await c.call('POST', `/sandboxes/${r.body.id}/exec`, { command: 'cat /root/baked.txt' }, i);
      expect(out.body.stdout).toBe('baked\n');
    }
    await c.nodes[0]!.nube.deps.nodes.setState('node-2', 'cordoned');
    await syncHeartbeats(c);
    const refused = await c.call('POST', '/sandboxes', { timeoutSeconds: 300, templateKey: 'nodes-test', templateHash: 'h1' }, 0);
    await c.nodes[0]!.nube.deps.nodes.setState('node-2', 'active');
    await syncHeartbeats(c);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toMatch(/node-2.*cordoned/);
    for (const id of [...ids, src0.body.id]) expect((await c.call('DELETE', `/sandboxes/${id}`, undefined, 0)).status).toBe(200);
    expect((await c.call('DELETE', `/template-snapshots/${tpl.body.id}`, undefined, 0)).status).toBe(200);
  }, 300_000);

  it("SSH through a node that does not hold the sandbox: node 0's gateway reaches node 2's sandbox", async () => {
    const askpass = join(root, 'askpass.sh');
    writeFileSync(askpass, '#!/bin/sh\nprintf "%s\\n" "$NUBE_TEST_PW"\n');
    chmodSync(askpass, 0o755);
    const sbx = await onlyOn(c, 'node-2', () => c.call('POST', '/sandboxes', { timeoutSeconds: 300 }, 1));
    expect(sbx.status, JSON.stringify(sbx.body)).toBe(200);
    const id = sbx.body.id as string;
    expect((await c.call('POST', `/sandboxes/${id}/ssh-enable`, {}, 0)).status).toBe(200);
    const tk = await c.call('POST', `/sandboxes/${id}/ssh-ticket`, {}, 1);
    expect(tk.status, JSON.stringify(tk.body)).toBe(200);
    // The answer names the holding node's gateway (the ticket was answered there): it works.
    expect(tk.body.port).toBe(c.nodes[2]!.nube.services.sandboxes.ssh.gateway.port);
    const direct = await openSsh(askpass, tk.body.host, tk.body.port, id, tk.body.password, 'hostname; exit 3');
    expect(direct.stdout.trim(), direct.stderr).toBe(id.replace('_', '-'));
    expect(direct.code).toBe(3);
    // Node 0's gateway holds nothing of it: the session's helper connections go through a tunnel to node 2.
    const probe = await c.nodes[0]!.nube.services.sandboxes.ssh.run(id, { mode: 'run', cmd: 'true' }).then(
      (p) => {
        p.close();
        return 'ok';
      },
      (e: unknown) => String(e),
    );
    expect(probe).toBe('ok');
    const gw0 = c.nodes[0]!.nube.services.sandboxes.ssh.gateway;
    await gw0.start();
    const via0 = await openSsh(askpass, c.nodes[0]!.nube.deps.config.sandboxes.raw.host, gw0.port, id, tk.body.password, 'hostname; wc -c', 'x'.repeat(100_000));
    expect(via0.code, via0.stderr).toBe(0);
    expect(via0.stdout.trim().split('\n')).toEqual([id.replace('_', '-'), '100000']);
    // The tunnel is for nodes only: without the credential 404, with a wrong one 401.
    const port0 = Number(new URL(c.nodes[0]!.baseUrl).port);
    const port2 = Number(new URL(c.nodes[2]!.baseUrl).port);
    const tunnel = (port: number, extra: Record<string, string>) =>
      new Promise<number>((resolve) => {
        const req = request({ host: '127.0.0.1', port, path: `/api/internal/ssh-helper/${id}`, headers: { connection: 'Upgrade', upgrade: 'nube-tunnel', ...extra } });
        req.on('upgrade', (_res, sock) => {
          sock.destroy();
          resolve(101);
        });
        req.on('response', (res) => resolve(res.statusCode ?? 0));
        req.on('error', () => resolve(-1));
        req.end();
      });
    expect(await tunnel(port0, {})).toBe(404);
    expect(await tunnel(port2, {})).toBe(404);
    expect(await tunnel(port2, { 'x-nube-node-token': 'forged' })).toBe(401);
    expect((await c.call('DELETE', `/sandboxes/${id}`, undefined, 0)).status).toBe(200);
  }, 300_000);

  let fleet: { id: string; token: string } = { id: '', token: '' };
  const GROUP = `web-${randomUUID()}`;
  it('a fleet agent created through node 0 runs its pool on node 1; messages through any node', async () => {
    const r = await onlyOn(c, 'node-1', () => c.call('POST', '/fleet-agents', { name: 'spread' }, 0));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    fleet = r.body;
    const db = c.nodes[0]!.nube.deps.store.db;
    expect((await db.selectFrom('fleet_agents').select('node_id').where('id', '=', fleet.id).executeTakeFirstOrThrow()).node_id).toBe('node-1');
    for (const i of [2, 0]) {
      const sent = await callJsonAs(c, i, 'POST', `/fleet-agents/${fleet.id}/message`, { groupId: GROUP, text: `hola ${i}` }, fleet.token);
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      expect(sent.body.reply).toBe(`echo: hola ${i}`);
    }
    // The conversation's box is an agent on node 1 (and so is the spare built for the next conversation).
    const boxes = await db.selectFrom('fleet_boxes').select(['agent_id', 'group_id']).where('fleet_agent_id', '=', fleet.id).execute();
    expect(boxes.filter((b) => b.group_id === GROUP)).toHaveLength(1);
    for (const b of boxes) expect((await db.selectFrom('agents').select('node_id').where('id', '=', b.agent_id).executeTakeFirstOrThrow()).node_id).toBe('node-1');
  }, 300_000);

  it("a box's minted key reaches a database held by another node: the box's node vouches for it; no caller can claim that", async () => {
    const m = await onlyOn(c, 'node-2', () => c.call('POST', '/machines', { tier: 'nano', name: 'keyed', nubeKey: { scopes: ['databases:write'] } }, 1));
    expect(m.status, JSON.stringify(m.body)).toBe(200);
    let sandboxId = '';
    for (const end = Date.now() + 120_000; !sandboxId; ) {
      const g = await c.call('GET', `/machines/${m.body.id}`, undefined, 0);
      if (g.body.status === 'running') sandboxId = g.body.sandboxId;
      else if (g.body.status === 'failed' || Date.now() > end) throw new Error(JSON.stringify(g.body));
      else await new Promise((r) => setTimeout(r, 200));
    }
    const db = await onlyOn(c, 'node-0', () => c.call('POST', '/databases', { name: `held-by-zero-${Date.now().toString(36)}` }, 0));
    expect(db.status, JSON.stringify(db.body)).toBe(201);
    const dbs = c.nodes[0]!.nube.deps.store.db;
    const row = await dbs.selectFrom('machines').select('node_id').where('id', '=', m.body.id).executeTakeFirstOrThrow();
    expect(row.node_id).toBe('node-2');
    const inBox = async (cmd: string) => (await c.call('POST', `/sandboxes/${sandboxId}/exec`, { command: cmd }, 1)).body.stdout as string;
    const query = (extra = '', base = '$NUBE_BASE_URL') =>
      `curl -s -m 30 -w '\\n%{http_code}' -H "Authorization: Bearer $NUBE_API_KEY" ${extra} -H 'content-type: application/json' ` +
      `-d '{"sql":"select 40 + 2 as n"}' "${base}/api/v2/databases/${db.body.id}/query"; echo " rc=$?"`;
    // Node 2 (the box's) relays the query to node 0 (the database's), which believes node 2's word.
    const through = await inBox(query());
    expect(through, through).toContain('200 rc=0');
    expect(through).toContain('42');
    // The key's id claimed by a client in the nodes' header is worth nothing without the node credential.
    const keys = (await c.call('GET', '/account/keys', undefined, 0)).body.items as { id: string; holder?: string | null }[];
    const held = keys.filter((k) => k.holder === `machine:${m.body.id}`);
    expect(held.length, JSON.stringify(keys)).toBe(1);
    const minted = (await inBox('printenv NUBE_API_KEY')).trim();
    const forged = await fetch(`${c.nodes[0]!.baseUrl}/api/v2/databases/${db.body.id}/query`, {
      method: 'POST',
      headers: { authorization: `Bearer ${minted}`, 'content-type': 'application/json', 'x-nube-node-box-key': held[0]!.id },
      body: JSON.stringify({ sql: 'select 1' }),
    });
    expect(forged.status).toBe(401);
    expect((await c.call('DELETE', `/machines/${m.body.id}`, undefined, 0)).status).toBe(200);
  }, 300_000);

  it("a down node's machine and agent show lost with the reason", async () => {
    expect(machineId && agentId).toBeTruthy();
    c.nodes[2]!.nube.deps.nodes.stop();
    await waitDown(c, 'node-2');
    const m = await c.call('GET', `/machines/${machineId}`, undefined, 0);
    expect(m.status).toBe(200);
    expect(m.body.status).toBe('lost');
    expect(m.body.lastError).toMatch(/node-2 is down: no heartbeat since/);
    const listed = await c.call('GET', '/machines', undefined, 1);
    expect(listed.body.machines.find((x: { id: string }) => x.id === machineId)?.status).toBe('lost');
    const a = await c.call('GET', `/agents/${agentId}`, undefined, 1);
    expect(a.body.status).toBe('lost');
    expect(a.body.error).toMatch(/node-2 is down/);
    // Work that needs the box answers 503 naming the node.
    const logs = await c.call('GET', `/machines/${machineId}/logs`, undefined, 0);
    expect(logs.status).toBe(503);
    expect(logs.body.error).toMatch(/node-2/);
    // Back: its heartbeats resume and both are served by it again.
    await c.nodes[2]!.nube.deps.nodes.start(c.nodes[2]!.baseUrl);
    await syncHeartbeats(c);
    expect((await c.call('GET', `/machines/${machineId}`, undefined, 0)).body.status).toBe('running');
    expect((await c.call('GET', `/agents/${agentId}`, undefined, 1)).body.status).toBe('running');
  }, 300_000);

  it('a fleet agent whose node is down moves on its next message; its conversation goes on', async () => {
    expect(fleet.id).toBeTruthy();
    c.nodes[1]!.nube.deps.nodes.stop();
    await waitDown(c, 'node-1');
    const sent = await callJsonAs(c, 0, 'POST', `/fleet-agents/${fleet.id}/message`, { groupId: GROUP, text: 'sigues ahi' }, fleet.token);
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    // A fresh box: the turn carries the conversation's transcript (the stub echoes the whole prompt).
    expect(sent.body.reply).toMatch(/^echo: Earlier in this conversation:[\s\S]*hola 0[\s\S]*sigues ahi$/);
    const db = c.nodes[0]!.nube.deps.store.db;
    const moved = (await db.selectFrom('fleet_agents').select('node_id').where('id', '=', fleet.id).executeTakeFirstOrThrow()).node_id;
    expect(moved).not.toBe('node-1');
    const read = await callJsonAs(c, 2, 'GET', `/fleet-agents/${fleet.id}/messages?groupId=${GROUP}`, undefined, fleet.token);
    const texts = read.body.items.map((m: { text: string }) => m.text) as string[];
    expect(texts.slice(0, 5)).toEqual(['hola 2', 'echo: hola 2', 'hola 0', 'echo: hola 0', 'sigues ahi']);
    expect(texts.at(-1)).toBe(sent.body.reply);
    await c.nodes[1]!.nube.deps.nodes.start(c.nodes[1]!.baseUrl);
    await syncHeartbeats(c);
  }, 300_000);
});
