// The real `e2b` SDK against nube: E2B's control plane past the basics. List pagination and filters,
// shortening timeouts, pause on timeout and waking on traffic, fork, metrics, snapshots, and how a
// killed sandbox looks from outside.
import { request } from 'node:http';
import { Sandbox, SandboxNotFoundError, TimeoutError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** E2B's maskRequestHost, `${PORT}` standing for the port asked for. */
const MASK = `inside.example:${'$'}{PORT}`;

function viaHost(host: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: Number(new URL(t.baseUrl).port), path: '/', headers: { ...headers, host } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function api(path: string) {
  const r = await fetch(`${t.baseUrl}/e2b${path}`, { headers: { 'X-API-KEY': t.ownerKey } });
  return { status: r.status, next: r.headers.get('x-next-token'), body: (await r.json()) as Record<string, unknown> & unknown[] };
}

describe('e2b SDK: control plane', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-control', ['base'], { NUBE_SANDBOX_CREATE_PER_MINUTE: '100' });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('lists in pages, newest first or oldest first, by start time, template, metadata and state', async () => {
    const tag = { run: `list-${Date.now()}` };
    const made: Sandbox[] = [];
    for (let i = 0; i < 3; i++) {
      made.push(await Sandbox.create({ metadata: tag }));
      await wait(20);
    }
    const ids = made.map((s) => s.sandboxId);
    const pager = Sandbox.list({ limit: 1, query: { metadata: tag } });
    const seen: string[] = [];
    while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId));
    expect(seen).toEqual([...ids].reverse());
    expect((await Sandbox.list({ query: { metadata: tag }, order: 'asc' }).nextItems()).map((s) => s.sandboxId)).toEqual(ids);
    const first = await made[1]!.getInfo();
    const after = await Sandbox.list({ query: { metadata: tag, startedAfter: first.startedAt } }).nextItems();
    expect(after.map((s) => s.sandboxId).sort()).toEqual(ids.slice(1).sort());
    expect(await Sandbox.list({ query: { metadata: tag, template: 'base' } }).nextItems()).toHaveLength(3);
    expect(await Sandbox.list({ query: { metadata: tag, template: 'no-such-template' } }).nextItems()).toEqual([]);
    await made[0]!.pause();
    expect((await Sandbox.list({ query: { metadata: tag, state: ['paused'] } }).nextItems()).map((s) => s.sandboxId)).toEqual([ids[0]]);
    // A repeated parameter and a comma list mean the same.
    const q = `metadata=${encodeURIComponent(`run=${tag.run}`)}`;
    expect((await api(`/v2/sandboxes?${q}&state=running&state=paused`)).body).toHaveLength(3);
    expect((await api(`/v2/sandboxes?${q}&state=running,paused`)).body).toHaveLength(3);
    const paged = await api(`/v2/sandboxes?${q}&limit=2`);
    expect(paged.body).toHaveLength(2);
    expect((await api(`/v2/sandboxes?${q}&limit=2&nextToken=${paged.next}`)).body).toHaveLength(1);
    // What it does not know is refused, not ignored.
    for (const bad of ['colour=red', 'state=asleep', 'limit=0', 'order=sideways', 'nextToken=xyz', 'startedAfter=yesterday']) {
      const r = await api(`/v2/sandboxes?${bad}`);
      expect(r.status, bad).toBe(400);
      expect(r.body, bad).toMatchObject({ code: 400 });
    }
    expect((await api(`/v2/sandboxes?colour=red`)).body.message).toMatch(/unknown query parameter colour/);
    expect((await api(`/sandboxes/${ids[1]}?verbose=1`)).status).toBe(400);
    for (const s of made) await s.kill();
  });

  it('shortens and lengthens a timeout', async () => {
    const short = await Sandbox.create({ timeoutMs: 300_000 });
    const long = await Sandbox.create({ timeoutMs: 300_000 });
    await short.setTimeout(2000);
    await long.setTimeout(2000);
    await long.setTimeout(60_000);
    expect((await short.getInfo()).endAt.getTime() - Date.now()).toBeLessThan(2500);
    await wait(4000);
    expect(await short.isRunning()).toBe(false);
    await expect(short.getInfo()).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await long.isRunning()).toBe(true);
    await long.kill();
  });

  it('pauses at the timeout when asked; traffic wakes it only with autoResume', async () => {
    const plain = await Sandbox.create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } });
    const waking = await Sandbox.create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause', autoResume: true } });
    expect((await plain.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: false });
    expect((await waking.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: true });
    // A server that the pause keeps (E2B's pause keeps memory): the wake finds it serving.
    await waking.commands.run('python3 -m http.server 8000', { background: true });
    await waking.commands.run('for i in $(seq 50); do python3 -c "import urllib.request as u; u.urlopen(\'http://127.0.0.1:8000/\')" 2>/dev/null && break; sleep 0.1; done');
    await wait(4500);
    for (const s of [plain, waking]) {
      expect((await s.getInfo()).state).toBe('paused');
      expect(await s.isRunning()).toBe(false);
    }
    const refused = await viaHost(plain.getHost(8000));
    expect(refused.status).toBe(502);
    expect(JSON.parse(refused.body)).toEqual({ sandboxId: plain.sandboxId, message: 'The sandbox was not found', code: 502 });
    expect((await plain.getInfo()).state).toBe('paused');
    expect((await viaHost(waking.getHost(8000))).status).toBe(200);
    // Woken for at least 5 minutes (as E2B's auto-resume), however short its own timeout.
    const woken = await waking.getInfo();
    expect(woken.state).toBe('running');
    expect(woken.endAt.getTime() - Date.now()).toBeGreaterThan(290_000);
    await plain.connect();
    expect(await plain.isRunning()).toBe(true);
    await plain.kill();
    await waking.kill();
  });

  it('forks: the children have the files and live apart', async () => {
    const parent = await Sandbox.create({ timeoutMs: 300_000, metadata: { role: 'parent' } });
    await parent.files.write('state.txt', 'before');
    const forks = await parent.fork({ count: 2, timeoutMs: 60_000 });
    expect(forks).toHaveLength(2);
    const [c1, c2] = forks as Sandbox[];
    expect(c1).toBeInstanceOf(Sandbox);
    expect(new Set([parent.sandboxId, c1!.sandboxId, c2!.sandboxId]).size).toBe(3);
    expect(await c1!.files.read('state.txt')).toBe('before');
    await c1!.files.write('state.txt', 'child');
    expect(await parent.files.read('state.txt')).toBe('before');
    expect(await c2!.files.read('state.txt')).toBe('before');
    expect((await c1!.getInfo()).metadata).toEqual({ role: 'parent' });
    for (const s of [c1!, c2!, parent]) await s.kill();
    await expect(parent.fork()).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it('measures CPU, memory and disk from the sandbox cgroups and layer', async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    const start = new Date();
    await s.commands.run('head -c 20000000 /dev/urandom > /home/user/blob');
    // Busy while measured: on cgroup v1 nube counts the CPU of the processes alive at each sample.
    const busy = await s.commands.run('while :; do :; done', { background: true });
    await s.getMetrics();
    await wait(1500);
    const m = (await s.getMetrics()).pop();
    await busy.kill();
    expect(m).toBeDefined();
    expect(m!.cpuCount).toBe(1);
    expect(m!.cpuUsedPct).toBeGreaterThan(0);
    expect(m!.memTotal).toBe(1024 * 1024 * 1024);
    expect(m!.memUsed).toBeGreaterThan(0);
    expect(m!.diskUsed).toBeGreaterThan(20_000_000);
    expect(m!.diskTotal).toBeGreaterThan(m!.diskUsed);
    await wait(1100);
    const inRange = await s.getMetrics({ start, end: new Date() });
    expect(inRange.length).toBeGreaterThan(0);
    expect(await s.getMetrics({ start: new Date(Date.now() - 3_600_000), end: new Date(Date.now() - 1_800_000) })).toEqual([]);
    await s.kill();
  });

  it('snapshots a sandbox into a template it can start from; lists and deletes them', async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    await s.files.write('/home/user/app/config.json', '{"env":"test"}');
    const snap = await s.createSnapshot({ name: 'my-snap' });
    expect(snap.snapshotId).toMatch(/^tpl_/);
    expect(snap.names).toEqual(['my-snap']);
    const from = await Sandbox.create(snap.snapshotId);
    expect(await from.files.read('/home/user/app/config.json')).toBe('{"env":"test"}');
    expect((await from.getInfo()).metadata).toEqual({});
    const mine = await s.listSnapshots().nextItems();
    expect(mine.map((x) => x.snapshotId)).toEqual([snap.snapshotId]);
    expect((await Sandbox.listSnapshots({ name: 'my-snap' }).nextItems()).map((x) => x.snapshotId)).toEqual([snap.snapshotId]);
    expect(await Sandbox.listSnapshots({ name: 'other' }).nextItems()).toEqual([]);
    await from.kill();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(false);
    await s.kill();
  });

  it('a killed sandbox: its commands end with TimeoutError, isRunning is false, its ports answer 502', async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    // nube says what a pause keeps on its driver (both freeze the processes in place).
    expect((await api(`/sandboxes/${s.sandboxId}`)).body).toMatchObject({ pauseKeeps: 'processes', state: 'running' });
    const plain = await s.commands.run('sleep 60', { background: true });
    const interactive = await s.commands.run('cat', { background: true, stdin: true });
    const host = s.getHost(8000);
    await s.kill();
    for (const cmd of [plain, interactive]) {
      const err = await cmd.wait().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TimeoutError);
      expect(String(err)).toMatch(/sandbox was killed/);
    }
    expect(await s.isRunning()).toBe(false);
    const r = await viaHost(host);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.body)).toEqual({ sandboxId: s.sandboxId, message: 'The sandbox was not found', code: 502 });
  });

  it("keeps a sandbox's ports private to its traffic token, and shows its servers the Host asked for", async () => {
    // A server that answers with the Host header it got.
    const echo = `python3 -c "
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = self.headers.get('host', '').encode()
        self.send_response(200); self.send_header('content-length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(('', 8080), H).serve_forever()
"`;
    const closed = await Sandbox.create({ timeoutMs: 300_000, network: { allowPublicTraffic: false, maskRequestHost: MASK } });
    await closed.commands.run(echo, { background: true });
    const host = closed.getHost(8080);
    expect((await viaHost(host)).status).toBe(403);
    expect((await viaHost(host, { 'e2b-traffic-access-token': 'forged' })).status).toBe(403);
    let r = { status: 0, body: '' };
    for (let i = 0; i < 50 && r.status !== 200; i++) {
      r = await viaHost(host, { 'e2b-traffic-access-token': closed.trafficAccessToken! });
      if (r.status !== 200) await wait(100);
    }
    expect(r).toEqual({ status: 200, body: 'inside.example:8080' });
    expect((await api(`/sandboxes/${closed.sandboxId}`)).body).toMatchObject({
      network: { allowPublicTraffic: false, maskRequestHost: MASK },
    });
    await closed.kill();
  });
});
