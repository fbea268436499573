// Issue 28 item 2: a machine's status says what its app does. A crash-looping app (exit 3 after 1 s),
// one the kernel kills for memory in a loop at its tier's memory, and one that never listens all used to
// show `running`, restart answered ok at once and cleared lastError, and a launch showed `running` while
// it was still starting and publishing. Here each is `crashing`, `oom` (from the cgroup's counter, said
// in the logs too), `starting` then `unhealthy`; restart answers once the app serves or fails with why;
// the port proxy's 502 says which; a launch stays `building` until its release is published.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { createRunning, getUrl, type MachineNube, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing, writeApp } from './helpers.js';
import { type SourceServer, startSourceServer, tarGz } from './source-server.js';

/** An app's start command only (nube.json), no files needed. */
const starting = (start: string) => ({ '/app/nube.json': JSON.stringify({ start }) });
/** Listens on $PORT after `delay` seconds and answers `body`. */
const slowServer = (delay: number, body: string) =>
  `sleep ${delay}; exec python3 -c 'import http.server,os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"${body}")
http.server.HTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()'`;

describe.each(DIALECTS)('%s: machine app status', (dialect) => {
  let t: MachineNube;
  let src: SourceServer;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let m: any;
  const get = async () => (await t.call('GET', `/machines/${m.id}`)).body;

  beforeAll(async () => {
    // A short start timeout keeps the never-listening case quick.
    t = await startMachineNube('status', dialect, { NUBE_MACHINE_START_TIMEOUT_S: '8' });
    src = await startSourceServer();
    m = await createRunning(t, { tier: 'micro', name: 'status' });
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await src?.close();
    await stopMachineNube(t);
  }, 120_000);

  it('a crash-looping app is `crashing` with its last exit and restarts; restart fails saying so; the 502 page says it', async () => {
    await writeApp(t, m.sandboxId, starting('echo about to fail; sleep 1; exit 3'));
    const r = await t.call('POST', `/machines/${m.id}/restart`);
    expect(r.status, JSON.stringify(r.body)).toBe(409);
    expect(r.body).toMatchObject({ code: 'AppCrashing', status: 'crashing', lastExit: { code: 3, oom: false } });
    expect(r.body.restarts).toBeGreaterThanOrEqual(1);
    expect(r.body.error).toContain('exited with code 3');
    expect(r.body.logTail.join('\n')).toContain('app exited with code 3');
    const g = await get();
    expect(g.status).toBe('crashing');
    expect(g.app).toMatchObject({ lastExit: { code: 3, signal: null, oom: false }, oomKills: 0 });
    expect(g.app.restarts).toBeGreaterThanOrEqual(1);
    expect(g.lastError).toMatch(/exited with code 3 .*restarted (once|\d+ times)/);
    // Listed the same way.
    const listed = (await t.call('GET', '/machines')).body.machines.find((x: { id: string }) => x.id === m.id);
    expect(listed.status).toBe('crashing');
    // A visitor gets a 502 that says why, as a page or as JSON.
    const page = await getWith(t, g.url, 'text/html');
    expect(page.status).toBe(502);
    expect(page.headers['x-nube-app-status']).toBe('crashing');
    expect(page.body).toContain('exited with code 3');
    const api = await getWith(t, g.url, 'application/json');
    expect(api.status).toBe(502);
    expect(JSON.parse(api.body)).toMatchObject({ code: 'BadGateway', status: 'crashing' });
  }, 120_000);

  it('an app that never listens is `starting`, then `unhealthy`; restart fails once the start timeout passes', async () => {
    await writeApp(t, m.sandboxId, starting('echo up but deaf; exec sleep 100000'));
    const t0 = Date.now();
    const restart = t.call('POST', `/machines/${m.id}/restart`);
    const seen = new Set<string>();
    let before: string | null = null;
    for (let i = 0; i < 200 && !seen.has('starting'); i++) {
      const g = await get();
      seen.add(g.status);
      before = g.lastError;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect([...seen]).toContain('starting');
    // The restart does not clear the last error while it waits: the app has not served yet.
    expect(before).not.toBeNull();
    const r = await restart;
    expect(r.status, JSON.stringify(r.body)).toBe(409);
    expect(r.body.code).toBe('AppNotServing');
    expect(r.body.error).toMatch(/did not answer on port 8080 within \d+ s/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(8000);
    const g = await get();
    expect(g.status).toBe('unhealthy');
    expect(g.lastError).toContain('has not answered on port 8080');
    expect(g.app.restarts).toBe(0);
    const page = await getWith(t, g.url, 'text/html');
    expect(page.status).toBe(502);
    expect(page.headers['x-nube-app-status']).toBe('unhealthy');
  }, 120_000);

  it('restart answers once the app serves again, keeping lastError until then', async () => {
    await writeApp(t, m.sandboxId, starting(slowServer(2, 'slow but fine')));
    const restart = t.call('POST', `/machines/${m.id}/restart`);
    await new Promise((res) => setTimeout(res, 800));
    const during = await get();
    expect(during.status).toBe('starting');
    expect(during.lastError).not.toBeNull();
    const r = await restart;
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.servingAfterMs).toBeGreaterThanOrEqual(2000);
    // Served already when the answer came: no polling needed.
    expect(await getUrl(t, during.url)).toEqual({ status: 200, body: 'slow but fine' });
    expect(await get()).toMatchObject({ status: 'running', lastError: null, app: { restarts: 0, lastExit: null } });
  }, 120_000);

  it('an app killed for memory in a loop at its tier is `oom`, from the cgroup counter, and the log says so', async () => {
    const small = await createRunning(t, { tier: 'nano', name: 'hungry' });
    // 400 MB of touched memory in a 256 MB box.
    await writeApp(t, small.sandboxId, starting(`python3 -c "import time; time.sleep(0.3); s = 'x' * (400 * 1024 * 1024); time.sleep(60)"`));
    const r = await t.call('POST', `/machines/${small.id}/restart`);
    expect(r.status, JSON.stringify(r.body)).toBe(409);
    expect(r.body).toMatchObject({ code: 'AppOutOfMemory', status: 'oom', lastExit: { code: 137, signal: 9, oom: true } });
    expect(r.body.error).toContain('more than its 256 MB');
    const g = (await t.call('GET', `/machines/${small.id}`)).body;
    expect(g.status).toBe('oom');
    expect(g.app.oomKills).toBeGreaterThanOrEqual(2);
    expect(g.lastError).toContain('out of memory');
    const logs = (await t.call('GET', `/machines/${small.id}/logs?lines=200`)).body.lines.join('\n');
    expect(logs).toContain('app exited with code 137 (killed by signal 9)');
    expect(logs).toContain('[nube] the kernel killed');
    expect(logs).toContain('for memory (out of memory: the nano tier has 256 MB)');
    expect((await t.call('DELETE', `/machines/${small.id}`)).status).toBe(200);
  }, 120_000);

  it('a launch keeps the machine `building` until its release is published, then `running`', async () => {
    src.put(
      '/slow.tar.gz',
      tarGz({ 'nube.json': JSON.stringify({ start: slowServer(2, 'launched slowly'), health: '/' }) }),
    );
    const samples: { status: string; phase: string | null; release: string | null }[] = [];
    let done = false;
    const watch = (async () => {
      while (!done) {
        const g = await get();
        samples.push({ status: g.status, phase: g.phase, release: g.currentReleaseId });
        await new Promise((res) => setTimeout(res, 50));
      }
    })();
    const r = await t.call('POST', '/machines/launch', { sandboxId: m.sandboxId, archiveUrl: `${src.base}/slow.tar.gz` });
    done = true;
    await watch;
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: 'running' });
    const during = samples.filter((s) => s.phase !== null);
    expect(during.map((s) => s.phase)).toContain('starting');
    expect(during.filter((s) => s.status !== 'building')).toEqual([]);
    expect(await get()).toMatchObject({ status: 'running', phase: null, currentReleaseId: r.body.releaseId });
    await waitServing(t, r.body.url, (b) => b === 'launched slowly');
  }, 180_000);
});

/** GET through nube's port proxy with an Accept header; answers status, headers and body. */
async function getWith(t: MachineNube, url: string, accept: string) {
  const port = Number(new URL(t.baseUrl).port);
  const { request } = await import('node:http');
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', headers: { host: new URL(url).host, accept } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
