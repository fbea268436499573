// Issue 19, item 5: three nube processes on this machine act as three nodes (test/nodes/processes.ts)
// and the integration test bodies of sandboxes, databases, files and webhooks run through a client
// that sends each request to the next node; streams (SSE through a sandbox's port, the terminal's
// WebSocket) are opened on a node that does not hold the sandbox. Then one node gets SIGKILL mid-run:
// what README promises to keep survives, and the others carry on.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { AccountRepo } from '../../src/areas/account/repo.js';
import { AccountService } from '../../src/areas/account/service.js';
import { Usage } from '../../src/platform/usage.js';
import { openStore } from '../../src/store/db.js';
import { otherOwnerBody, usageBody } from '../databases/bodies.js';
import { trashAndRestoreBody } from '../files/bodies.js';
import { filesApi, upload } from '../files/helpers.js';
import { caller, json } from '../helpers/server.js';
import { bgBody, deleteBody, execBody, filesBody, patchBody, suspendResumeBody } from '../sandboxes/lifecycle-bodies.js';
import { createRunning, TEMPLATE_WAIT_MS, until } from '../sandboxes/helpers.js';
import { deliveredOncePerEvent } from '../webhooks/bodies.js';
import { type Receiver, startReceiver } from '../webhooks/receiver.js';
import { HEARTBEAT_MS, type ProcCluster, startProcessCluster } from './processes.js';
import { getStream, SSE_SERVER } from './sse-server.js';

describe('three nube processes as three nodes', () => {
  let c: ProcCluster;
  let rx: Receiver;
  const api = () => filesApi(c.client);
  /** The index of the node a sandbox or database is on, and of one that does not hold it. */
  const holder = async (table: 'sandboxes' | 'databases', id: string) => {
    const node = await c.nodeOf(table, id);
    const i = c.nodes.findIndex((n) => n.id === node);
    expect(i, `${table} ${id} on ${node}`).toBeGreaterThanOrEqual(0);
    return { at: i, other: (i + 1) % 3 };
  };

  beforeAll(async () => {
    c = await startProcessCluster();
    rx = await startReceiver();
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (!c) return;
    // A killed node comes back first: its reconcile destroys the sandboxes it held without records.
    for (const n of c.nodes) if (!n.alive) await c.restart(n.index).catch((e) => console.error(e));
    const list = await c.client.call('GET', '/sandboxes');
    for (const s of list.body?.sandboxes ?? []) await c.client.call('DELETE', `/sandboxes/${s.id}`);
    await c.close();
    await rx?.close();
  }, 600_000);

  it('registers the three processes as up, active nodes', async () => {
    const rows = await c.sql<{ id: string; address: string; state: string }>('SELECT id, address, state FROM nodes ORDER BY id');
    expect(rows.map((r) => [r.id, r.address, r.state])).toEqual(c.nodes.map((n) => [n.id, n.baseUrl, 'active']));
  });

  describe('a sandbox through the spreading client', () => {
    let id: string;
    beforeAll(async () => {
      id = (await createRunning(c.client, { timeoutSeconds: 600, env: { GREETING: 'hola' } })).id;
    }, TEMPLATE_WAIT_MS);

    it('execs with env, cwd and per-call env', () => execBody(c.client, id));
    it('files: write, read, list, mkdir, move, delete', () => filesBody(c.client, id));
    it('bg: start, list, logs from offsets, kill', () => bgBody(c.client, id), 180_000);
    it('apply-patch', () => patchBody(c.client, id));

    it('an exposed port answers through the other nodes; its SSE stream flows through one event at a time', async () => {
      const { at, other } = await holder('sandboxes', id);
      const w = await c.client.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/sse.py', content: SSE_SERVER });
      expect(w.status, JSON.stringify(w.body)).toBe(200);
      expect((await c.client.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/sse.py' })).status).toBe(200);
      expect((await c.client.call('POST', `/sandboxes/${id}/expose`, { port: 9002 })).status).toBe(200);
      const ready = await c.client.call('POST', `/sandboxes/${id}/exec`, {
        command: `for i in $(seq 300); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 9002))" 2>/dev/null && exit 0; sleep 0.1; done; exit 1`,
      });
      expect(ready.body.exitCode, JSON.stringify(ready.body)).toBe(0);
      const port = c.nodes[other]!.port;
      expect(other).not.toBe(at);
      let released = false;
      const stream = await getStream(port, `9002-${id}.sandbox.localhost:${port}`, (_chunk, soFar) => {
        // The first event came through while the server still waits: only now is it told to go on.
        if (!released && soFar.includes('data: first\n\n')) {
          released = true;
          expect(soFar).not.toContain('second');
          void c.client.call('POST', `/sandboxes/${id}/exec`, { command: 'touch /tmp/sse-go' });
        }
      });
      expect(stream.status).toBe(200);
      expect(stream.contentType).toBe('text/event-stream');
      expect(released).toBe(true);
      expect(stream.body).toBe('data: first\n\ndata: second\n\n');
    }, 120_000);

    it('the terminal WebSocket opened on a node that does not hold the sandbox', async () => {
      const { other } = await holder('sandboxes', id);
      const ws = new WebSocket(`ws://127.0.0.1:${c.nodes[other]!.port}/api/v2/sandboxes/${id}/terminal?rows=30&cols=100`, { headers: c.client.auth });
      let text = '';
      const exit = new Promise<{ type: string; code: number }>((resolve, reject) => {
        ws.on('message', (d: Buffer, binary: boolean) => {
          if (binary) text += d.toString();
          else resolve(JSON.parse(d.toString()));
        });
        ws.on('error', reject);
      });
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      ws.send(Buffer.from('echo "hola-$((6*7))"; stty size\r'));
      const seen = await until(async () => text, (t) => /hola-42\r\n30 100\r\n/.test(t), 30_000);
      expect(seen).toMatch(/hola-42\r\n30 100\r\n/);
      ws.send(Buffer.from('exit 3\r'));
      expect(await exit).toEqual({ type: 'exit', code: 3 });
      ws.close();
    }, 60_000);

    it('bootstrap, suspend and resume', () => suspendResumeBody(c.client, id), 120_000);
    it('delete destroys; afterwards every route is 404', () => deleteBody(c.client, id));
  });

  describe('databases through the spreading client', () => {
    it('size and rows read/written', () => usageBody(caller(c.client)));

    it("another owner's database is a 404 on every node", async () => {
      const store = openStore({ databaseUrl: c.nodes[0]!.env.DATABASE_URL, dataDir: c.nodes[0]!.dataDir });
      try {
        const { secret } = await new AccountService(new AccountRepo(store.db), new Usage(store.db), 0).createAccount({ name: 'other', plan: 'mega' });
        await otherOwnerBody(caller(c.client), secret);
      } finally {
        await store.close();
      }
    });

    it('creates spread over the nodes; each is queried and listed from every node', async () => {
      const ids: string[] = [];
      const tag = Date.now().toString(36);
      for (let i = 0; i < 6; i++) {
        // Replicas place from heartbeats (each also counts its own placements): a burst through three
        // replicas inside one heartbeat all goes to the least loaded node, so creates here are a beat apart.
        if (i) await sleep(HEARTBEAT_MS * 2);
        const r = await c.client.call('POST', '/databases', { name: `spread-${tag}-${i}` });
        expect(r.status, JSON.stringify(r.body)).toBe(201);
        ids.push(r.body.id);
      }
      const held = new Set(await Promise.all(ids.map((id) => c.nodeOf('databases', id))));
      expect(held.size).toBeGreaterThan(1);
      for (const id of ids) {
        for (let i = 0; i < 3; i++) {
          const r = await c.on(i).call('POST', `/databases/${id}/query`, { sql: 'SELECT ? AS n', args: [i] });
          expect(r.status, JSON.stringify(r.body)).toBe(200);
        }
      }
      for (let i = 0; i < 3; i++) {
        const listed = (await c.on(i).call('GET', '/databases')).body.items.map((d: { id: string }) => d.id);
        expect(listed).toEqual(expect.arrayContaining(ids));
      }
      for (const id of ids) expect((await c.client.call('DELETE', `/databases/${id}`)).status).toBe(200);
    });
  });

  describe('files through the spreading client', () => {
    it('upload on one node, the presigned download from each of the others', async () => {
      const data = Buffer.from(`bytes in s3rver ${Date.now()}\n`);
      const f = await upload({ api: api() }, 'spread.txt', data);
      const got = await json(await api()(`/files/${f.id}`));
      const url = new URL(got.readUrl);
      for (const n of c.nodes) {
        const read = await fetch(`${n.baseUrl}${url.pathname}${url.search}`);
        expect(read.status, n.id).toBe(200);
        expect(Buffer.from(await read.arrayBuffer()).equals(data)).toBe(true);
      }
    });

    it('trash and restore', async () => {
      const f = await upload({ api: api() }, 'trash.txt', Buffer.from('trash'));
      await trashAndRestoreBody({ api: api() }, f.id);
    });
  });

  describe('webhooks', () => {
    it('each event is delivered once, signed, though three replicas drain the outbox', async () => {
      const hook = await c.client.call('POST', '/webhooks', { url: rx.url, events: ['database.created'] });
      expect(hook.status, JSON.stringify(hook.body)).toBe(201);
      const ids: string[] = [];
      const tag = Date.now().toString(36);
      for (let i = 0; i < 9; i++) ids.push((await c.client.call('POST', '/databases', { name: `hooked-${tag}-${i}` })).body.id);
      await deliveredOncePerEvent(c.client, rx, hook.body, ids);
      expect((await c.client.call('DELETE', `/webhooks/${hook.body.id}`)).status).toBe(200);
      for (const id of ids) await c.client.call('DELETE', `/databases/${id}`);
    }, 120_000);
  });

  describe('one node killed with SIGKILL mid-run', () => {
    /** Creates a sandbox and a database on node i: the other two are cordoned meanwhile (as `nube nodes cordon` does). */
    async function on(i: number, tag: string) {
      const others = c.nodes.filter((n) => n.index !== i).map((n) => n.id);
      await c.sql("UPDATE nodes SET state = 'cordoned' WHERE id = ANY($1)", [others]);
      try {
        // Each replica reads the table again within a heartbeat.
        await sleep(HEARTBEAT_MS * 3);
        const sbx = await createRunning(c.client, { timeoutSeconds: 600 });
        const db = await c.client.call('POST', '/databases', { name: `kill-${tag}-${i}` });
        expect(db.status, JSON.stringify(db.body)).toBe(201);
        expect(await c.nodeOf('sandboxes', sbx.id)).toBe(c.nodes[i]!.id);
        expect(await c.nodeOf('databases', db.body.id)).toBe(c.nodes[i]!.id);
        expect((await c.client.call('POST', `/databases/${db.body.id}/query`, { sql: 'CREATE TABLE t (v TEXT)' })).status).toBe(200);
        const q = await c.client.call('POST', `/databases/${db.body.id}/query`, { sql: 'INSERT INTO t VALUES (?)', args: [`on ${i}`] });
        expect(q.status, JSON.stringify(q.body)).toBe(200);
        return { sandbox: sbx.id as string, database: db.body.id as string, insertedAt: Date.now() };
      } finally {
        await c.sql("UPDATE nodes SET state = 'active' WHERE id = ANY($1)", [others]);
      }
    }

    it('keeps accounts, keys, files and webhook deliveries; lost sandboxes say why; the others carry on', async () => {
      const tag = Date.now().toString(36);
      const held = [];
      for (let i = 0; i < 3; i++) held.push(await on(i, tag));
      const key = await c.client.call('POST', '/account/keys', { name: 'made before the kill' });
      expect(key.status).toBe(201);
      const data = Buffer.from(`kept ${tag}\n`);
      const file = await upload({ api: api() }, 'kept.txt', data);
      const readUrl = new URL((await json(await api()(`/files/${file.id}`))).readUrl);

      // A delivery in flight when its node dies: the first attempt fails fast (500), the retry is a job
      // that some node leases; the receiver holds that request, and that node is the one killed.
      const rx2 = await startReceiver();
      try {
        rx2.status = 500;
        const hook = await c.client.call('POST', '/webhooks', { url: rx2.url, events: ['file.created'] });
        expect(hook.status).toBe(201);
        const trigger = await upload({ api: api() }, 'trigger.txt', Buffer.from('event'));
        await rx2.waitFor(1, 60_000);
        rx2.status = 200;
        rx2.delayMs = 600_000;
        rx2.delayFirst = 2;
        const [, second] = await rx2.waitFor(2, 60_000);
        const deliveryId = String(second!.headers['x-service-delivery']);
        const [job] = await c.sql<{ leased_by: string }>("SELECT leased_by FROM jobs WHERE key = $1 AND status = 'running'", [deliveryId]);
        expect(job?.leased_by, 'the retry is leased while the receiver holds it').toMatch(/@proc-\d(#|$)/);
        const victim = Number(/@proc-(\d)/.exec(job!.leased_by)![1]);
        const victimId = c.nodes[victim]!.id;
        const survivors = c.nodes.filter((n) => n.index !== victim).map((n) => n.index);

        // README's promise for a database: what was committed before its last copy comes back. Its copy
        // (taken within NUBE_DATABASE_SHIP_MS of the insert) is in S3 before the node dies.
        const held_ = held[victim]!;
        await until(
          () => c.sql<{ copy_at: string | null }>('SELECT copy_at FROM databases WHERE id = $1', [held_.database]),
          (rows) => rows[0]?.copy_at != null && Number(rows[0].copy_at) >= held_.insertedAt,
          30_000,
        );
        const killedAt = Date.now();
        await c.kill(victim);
        const [lease] = await c.sql<{ lease_until: string; attempts: number }>('SELECT lease_until, attempts FROM jobs WHERE key = $1', [deliveryId]);
        // The attempt was cut off, not recorded: the job is still the dead node's until its lease ends.
        expect(lease!.attempts).toBe(1);
        await c.waitDown(victim);

        // Its sandbox is lost, with the reason, seen from every surviving node; work on it is a 503.
        const lost = held[victim]!.sandbox;
        for (const i of survivors) {
          const got = await c.on(i).call('GET', `/sandboxes/${lost}`);
          expect(got.status).toBe(200);
          expect(got.body.status).toBe('lost');
          expect(got.body.error).toMatch(new RegExp(`${victimId} is down: no heartbeat since`));
          const listed = await c.on(i).call('GET', '/sandboxes');
          expect(listed.body.sandboxes.find((x: { id: string }) => x.id === lost)?.status).toBe('lost');
          const ex = await c.on(i).call('POST', `/sandboxes/${lost}/exec`, { command: 'true' });
          expect(ex.status).toBe(503);
          expect(ex.body.error).toMatch(victimId);
        }
        // The other nodes' sandboxes and databases answer from any surviving node.
        for (const [n, h] of held.entries()) {
          if (n === victim) continue;
          for (const i of survivors) {
            const ex = await c.on(i).call('POST', `/sandboxes/${h.sandbox}/exec`, { command: `echo alive-${n}` });
            expect(ex.status, JSON.stringify(ex.body)).toBe(200);
            expect(ex.body.stdout).toBe(`alive-${n}\n`);
            const q = await c.on(i).call('POST', `/databases/${h.database}/query`, { sql: 'SELECT v FROM t' });
            expect(q.status, JSON.stringify(q.body)).toBe(200);
            expect(JSON.stringify(q.body.rows)).toContain(`on ${n}`);
          }
        }
        // Its databases come back on a surviving node from their copy in S3, with the committed row.
        const moved = await until(
          () => c.client.call('POST', `/databases/${held_.database}/query`, { sql: 'SELECT v FROM t' }),
          (r) => r.status === 200,
          60_000,
        );
        expect(moved.status, JSON.stringify(moved.body)).toBe(200);
        expect(JSON.stringify(moved.body.rows)).toContain(`on ${victim}`);
        const holder = await c.nodeOf('databases', held_.database);
        expect(survivors.map((i) => c.nodes[i]!.id)).toContain(holder);
        for (const i of survivors) {
          const q = await c.on(i).call('POST', `/databases/${held_.database}/query`, { sql: 'SELECT v FROM t' });
          expect(q.status, JSON.stringify(q.body)).toBe(200);
        }

        // New sandboxes and databases go to the two others.
        for (let k = 0; k < 2; k++) {
          const sbx = await createRunning(c.client, { timeoutSeconds: 120 });
          expect(await c.nodeOf('sandboxes', sbx.id)).not.toBe(victimId);
          const db = await c.client.call('POST', '/databases', { name: `kill-${tag}-after-${k}` });
          expect(db.status).toBe(201);
          expect(await c.nodeOf('databases', db.body.id)).not.toBe(victimId);
          expect((await c.client.call('DELETE', `/sandboxes/${sbx.id}`)).status).toBe(200);
        }
        // Accounts, keys and files live in PostgreSQL and S3: every surviving node serves them.
        for (const i of survivors) {
          const me = await fetch(`${c.nodes[i]!.baseUrl}/api/v2/account`, { headers: { authorization: `Bearer ${key.body.secret}` } });
          expect(me.status).toBe(200);
          const read = await fetch(`${c.nodes[i]!.baseUrl}${readUrl.pathname}${readUrl.search}`);
          expect(read.status).toBe(200);
          expect(Buffer.from(await read.arrayBuffer()).equals(data)).toBe(true);
        }
        // The delivery the dead node held is retried by another node: here at once, since the three
        // nodes share a host and a survivor sees the holder's process is gone (platform/worker-liveness.ts);
        // on separate hosts once its lease is over. Never while the holder lived, never twice.
        const [third] = (await rx2.waitFor(3, 120_000)).slice(2);
        expect(third!.headers['x-service-delivery']).toBe(deliveryId);
        expect(third!.at).toBeGreaterThanOrEqual(killedAt);
        expect(third!.at).toBeLessThan(Number(lease!.lease_until));
        const after = await until(() => c.client.call('GET', `/webhooks/${hook.body.id}/deliveries`), (r) => r.body.items?.[0]?.status === 'succeeded', 30_000);
        expect(after.body.items).toHaveLength(1);
        expect(after.body.items[0]).toMatchObject({ id: deliveryId, status: 'succeeded' });
        const [retried] = await c.sql<{ leased_by: string }>('SELECT leased_by FROM jobs WHERE key = $1', [deliveryId]);
        expect(retried!.leased_by).not.toMatch(new RegExp(`@${victimId}$`));
        expect(JSON.parse(third!.raw).data.id).toBe(trigger.id);

        // The lost sandbox's record goes on delete; the node, back, destroys what is left of it.
        expect((await c.client.call('DELETE', `/sandboxes/${lost}`)).status).toBe(200);
        expect((await c.client.call('GET', `/sandboxes/${lost}`)).status).toBe(404);
        const leftover = () => [lost, lost.replace('_', '-')].some((x) => existsSync(join(c.nodes[victim]!.dataDir, 'sandbox-runtime', 'sandboxes', x)));
        expect(leftover()).toBe(true);
        await c.restart(victim);
        expect(await until(async () => leftover(), (x) => !x, 60_000)).toBe(false);
        const back = await c.on(victim).call('GET', `/sandboxes/${held[(victim + 1) % 3]!.sandbox}`);
        expect(back.body.status).toBe('running');
      } finally {
        await rx2.close();
      }
    }, 600_000);
  });
});
