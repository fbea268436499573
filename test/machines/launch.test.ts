// Launch from an archive (tar.gz, zip) or a git repository served locally: fetched through the
// outbound guard, built inside the box, released (the first is the recovery release), served on the
// machine's URL; redeploys onto the same machine; private addresses and bad input refused.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type MachineNube, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing } from './helpers.js';
import { type SourceServer, startSourceServer, tarGz, wheel, zip } from './source-server.js';

const nodeApp = (version: string) => ({
  'package.json': JSON.stringify({ name: 'app', version: '1.0.0', scripts: { start: 'node server.js', build: 'echo building-the-app' } }),
  'server.js': `require('http').createServer((q, s) => s.end('hello ${version}')).listen(Number(process.env.PORT), '0.0.0.0');\n`,
});

describe.each(DIALECTS)('%s: machine launch', (dialect) => {
  let t: MachineNube;
  let src: SourceServer;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let first: any;

  beforeAll(async () => {
    t = await startMachineNube('launch', dialect);
    src = await startSourceServer();
    src.put('/app.tar.gz', tarGz(nodeApp('tgz')));
    src.put('/app.zip', zip({ ...nodeApp('zip'), 'nube.json': JSON.stringify({ start: 'node server.js', port: 3000 }) }));
    src.put('/site.tar.gz', tarGz({ 'index.html': '<h1>static site</h1>' }));
    src.put('/broken.tar.gz', tarGz({ 'package.json': JSON.stringify({ scripts: { build: 'echo kaput >&2; exit 4', start: 'node x.js' } }) }));
    src.put(
      '/py.tar.gz',
      tarGz({
        'app.py': `import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'hello python')
http.server.HTTPServer(('0.0.0.0', int(os.environ['PORT'])), H).serve_forever()
`,
      }),
    );
    // requirements.txt naming a wheel shipped with the app: pip installs it into the build's venv with no index.
    const greeting = wheel('greeting', '1.0', "def hello():\n    return 'hello from a venv'\n");
    src.put(
      '/pyreq.tar.gz',
      tarGz({
        'requirements.txt': `./vendor/${greeting.file}\n`,
        [`vendor/${greeting.file}`]: greeting.bytes,
        'main.py': `import http.server, os, greeting
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(greeting.hello().encode())
http.server.HTTPServer(('0.0.0.0', int(os.environ['PORT'])), H).serve_forever()
`,
      }),
    );
    src.put('/wsgi.tar.gz', tarGz({ 'wsgi.py': "def application(environ, start_response):\n    start_response('200 OK', [('Content-Type', 'text/plain')])\n    return [b'hello wsgi']\n" }));
    src.put('/notes.txt', Buffer.from('not an archive'));
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await src.close();
    await stopMachineNube(t);
  }, 120_000);

  it('refuses bad launches: both or neither source, nano, a private address, a non-archive', async () => {
    const bad = async (body: unknown, status = 400) => {
      const r = await t.call('POST', '/machines/launch', body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      return r.body;
    };
    expect((await bad({ repo: `${src.base}/git/x.git`, archiveUrl: `${src.base}/app.tar.gz` })).issues.length).toBeGreaterThan(0);
    expect((await bad({})).issues.length).toBeGreaterThan(0);
    expect(JSON.stringify(await bad({ archiveUrl: `${src.base}/app.tar.gz`, tier: 'nano' }))).toContain('cannot sustain a build');
    expect(JSON.stringify(await bad({ repo: 'http://192.168.77.1/app.git' }))).toContain('refused');
    expect(JSON.stringify(await bad({ archiveUrl: 'http://10.9.8.7/app.tar.gz' }))).toContain('refused');
    await bad({ archiveUrl: `${src.base}/notes.txt` });
    await bad({ sandboxId: 'sbx_nosuch' }, 404);
    // A domain is checked before anything is fetched or built (the domains tests cover attaching one).
    expect((await bad({ archiveUrl: `${src.base}/app.tar.gz`, domain: 'not a domain' })).issues[0].path).toEqual(['body', 'domain']);
    // None of those left a machine behind.
    expect((await t.call('GET', '/machines')).body.machines).toEqual([]);
  });

  it('launches a Node app from a tar.gz: built in the box, recovery release, served on its URL', async () => {
    const t0 = performance.now();
    const r = await t.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, name: 'launched' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: "running", domain: null });
    expect(r.body.buildLog).toContain('building-the-app');
    await waitServing(t, r.body.url, (b) => b === 'hello tgz');
    console.log(`[machines ${dialect}] launch from archive to first 200: ${Math.round(performance.now() - t0)} ms`);
    first = r.body;
    const rel = await t.call('GET', `/machines/${r.body.machineId}/releases`);
    expect(rel.body.releases).toHaveLength(1);
    expect(rel.body.releases[0]).toMatchObject({ id: r.body.releaseId, source: 'recovery', current: true });
    const m = await t.call('GET', `/machines/${r.body.machineId}`);
    expect(m.body).toMatchObject({ name: 'launched', tier: 'micro', status: 'running', phase: null, url: r.body.url });
    const logs = (await t.call('GET', `/machines/${r.body.machineId}/logs?grep=[build]`)).body.lines.join('\n');
    expect(logs).toContain('[build] building-the-app');
  }, 180_000);

  it('redeploys onto the same machine: a zip with a runspec port, a static site, a failing build', async () => {
    const z = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, archiveUrl: `${src.base}/app.zip` });
    expect(z.body, JSON.stringify(z.body)).toMatchObject({ status: 'running', machineId: first.machineId });
    expect(z.body.url).toMatch(/^http:\/\/3000-/);
    await waitServing(t, z.body.url, (b) => b === 'hello zip');
    const s = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, archiveUrl: `${src.base}/site.tar.gz` });
    expect(s.body.status).toBe('running');
    await waitServing(t, s.body.url, (b) => b.includes('static site'));
    const b = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, archiveUrl: `${src.base}/broken.tar.gz` });
    expect(b.body.status).toBe('failed');
    expect(b.body.buildLog).toContain('kaput');
    // The running app is untouched by the failed build.
    await waitServing(t, s.body.url, (x) => x.includes('static site'));
    const m = await t.call('GET', `/machines/${first.machineId}`);
    expect(m.body.lastError).toContain('the build failed');
    const rel = await t.call('GET', `/machines/${first.machineId}/releases`);
    expect(rel.body.releases.map((x: { source: string }) => x.source)).toEqual(['launch', 'launch', 'recovery']);
  }, 240_000);

  it('runs a Python app; launch env and start command apply; the log rotates by size', async () => {
    const r = await t.call('POST', '/machines/launch', {
      sandboxId: first.sandboxId,
      archiveUrl: `${src.base}/py.tar.gz`,
      env: { NUBE_LOG_MAX_BYTES: '4000' },
      startCommand: 'for i in $(seq 1 300); do echo "rotating line $i"; done; exec python3 app.py',
    });
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: 'running' });
    await waitServing(t, r.body.url, (b) => b === 'hello python');
    const ls = await t.call('POST', `/sandboxes/${first.sandboxId}/exec`, { command: 'ls /var/log/nube; stat -c %s /var/log/nube/app.log' });
    const [current, rotated, size] = ls.body.stdout.trim().split('\n');
    expect([current, rotated]).toEqual(['app.log', 'app.log.1']);
    expect(Number(size)).toBeLessThan(4200);
    const lines = (await t.call('GET', `/machines/${first.machineId}/logs?lines=10000&grep=rotating`)).body.lines as string[];
    expect(lines.at(-1)).toMatch(/rotating line 300$/);
    expect(lines.length).toBeLessThan(300);
    expect(lines.length).toBeGreaterThan(50);
  }, 180_000);

  it('builds a Python app from its requirements.txt into a venv and runs it with the venv', async () => {
    const r = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, archiveUrl: `${src.base}/pyreq.tar.gz` });
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: 'running' });
    expect(r.body.buildLog).toContain('Successfully installed greeting-1.0');
    await waitServing(t, r.body.url, (b) => b === 'hello from a venv');
    const py = await t.call('POST', `/sandboxes/${first.sandboxId}/exec`, { command: 'cd /app && .venv/bin/python -c "import greeting; print(greeting.__file__)"' });
    expect(py.body.stdout).toMatch(/^\/app\/\.venv\/lib\/python3[.\d]*\/site-packages\/greeting\/__init__\.py\n$/);
    // A WSGI app object with no server named: served by the standard library's wsgiref.
    const w = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, archiveUrl: `${src.base}/wsgi.tar.gz` });
    expect(w.body, JSON.stringify(w.body)).toMatchObject({ status: 'running' });
    await waitServing(t, w.body.url, (b) => b === 'hello wsgi');
  }, 240_000);

  it('builds as root inside its box only: nothing it writes reaches the host', async () => {
    const marker = `/nube-build-escape-${Date.now()}`;
    const r = await t.call('POST', '/machines/launch', {
      sandboxId: first.sandboxId,
      archiveUrl: `${src.base}/app.tar.gz`,
      buildCommand: `id -u > built-by.txt && touch ${marker} && test -f ${marker}`,
    });
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: 'running' });
    const inBox = await t.call('POST', `/sandboxes/${first.sandboxId}/exec`, { command: `cat /app/built-by.txt; test -f ${marker} && echo inside` });
    expect(inBox.body.stdout).toBe('0\ninside\n');
    expect(existsSync(marker)).toBe(false);
  }, 180_000);

  it('launches from a git repository at a tag, then redeploys its current source with sandboxId alone', async () => {
    const repo = src.gitRepo('app', [
      { tag: 'v1', files: nodeApp('git-v1') },
      { tag: 'v2', files: nodeApp('git-v2') },
    ]);
    const r = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, repo, ref: 'v1' });
    expect(r.body, JSON.stringify(r.body)).toMatchObject({ status: 'running' });
    await waitServing(t, r.body.url, (b) => b === 'hello git-v1');
    const head = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, repo });
    await waitServing(t, head.body.url, (b) => b === 'hello git-v2');
    const again = await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId });
    expect(again.body.status).toBe('running');
    await waitServing(t, again.body.url, (b) => b === 'hello git-v2');
    expect((await t.call('POST', '/machines/launch', { sandboxId: first.sandboxId, repo, ref: 'nope' })).status).toBe(400);
    // Rollback to the recovery release: the tgz app again, nothing rebuilt.
    const rb = await t.call('POST', `/machines/${first.machineId}/rollback`, { releaseId: first.releaseId });
    expect(rb.status).toBe(200);
    await waitServing(t, first.url, (b) => b === 'hello tgz');
  }, 240_000);
});
