// HTTPS and custom domains for what runs in boxes: with NUBE_HTTPS_PORT and a wildcard certificate
// given as files, `expose` answers https:// URLs served through nube's HTTPS listener (SNI picks the
// file certificate; a name it does not cover fails the handshake); a machine launched with `domain`
// has it attached, routes nowhere until verified, then its app answers on the domain; deleting the
// machine leaves the domain the owner's, attached to nothing.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type MachineNube, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitServing } from '../machines/helpers.js';
import { type SourceServer, startSourceServer, tarGz } from '../machines/source-server.js';
import { httpGet, httpsGet, until } from './clients.js';
import { startDns, type TestDns } from './dns.js';
import { makeCert } from './pebble.js';

const app = {
  'package.json': JSON.stringify({ name: 'app', version: '1.0.0', scripts: { start: 'node server.js' } }),
  'server.js': `require('http').createServer((q, s) => s.end('machine at ' + q.headers.host + ' via ' + q.headers['x-forwarded-proto'])).listen(Number(process.env.PORT), '0.0.0.0');\n`,
};

describe.each(DIALECTS)('%s: HTTPS and domains for sandboxes and machines', (dialect) => {
  let t: MachineNube;
  let dns: TestDns;
  let src: SourceServer;
  let certDir: string;
  let ca: string;
  let httpPort: number;
  let httpsPort: number;
  const DOMAIN = `app-${dialect}.example.test`;

  beforeAll(async () => {
    dns = await startDns();
    certDir = mkdtempSync(join(tmpdir(), 'nube-wildcard-'));
    const files = makeCert(certDir, 'wildcard', ['*.sandbox.localhost', '*.sites.localhost']);
    ca = readFileSync(files.ca, 'utf8');
    t = await startMachineNube('https', dialect, {
      NUBE_HTTPS_PORT: '0',
      NUBE_TLS_CERT_FILE: files.cert,
      NUBE_TLS_KEY_FILE: files.key,
      NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}`,
    });
    httpPort = Number(new URL(t.baseUrl).port);
    httpsPort = Number(new URL(t.nube.deps.httpsUrl()!).port);
    src = await startSourceServer();
    src.put('/app.tar.gz', tarGz(app));
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await src?.close();
    if (t) await stopMachineNube(t);
    dns?.close();
    rmSync(certDir, { recursive: true, force: true });
  }, 120_000);

  it('expose answers an https:// URL served through the HTTPS listener with the wildcard file certificate', async () => {
    const id = (await t.call('POST', '/sandboxes', { timeoutSeconds: 600 })).body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/www/index.html', content: 'over tls' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 -m http.server 8080 --bind 0.0.0.0', cwd: '/root/www' });
    const e = await t.call('POST', `/sandboxes/${id}/expose`, { port: 8080 });
    expect(e.status, JSON.stringify(e.body)).toBe(200);
    const url = new URL(e.body.url);
    expect(url.protocol).toBe('https:');
    expect(Number(url.port)).toBe(httpsPort);
    const r = await until(
      () => httpsGet(httpsPort, url.hostname, ca).catch(() => null),
      (x) => x?.status === 200,
      30_000,
    );
    expect(r?.body).toBe('over tls');
    expect(r?.cert?.checkHost(url.hostname)).toBe('*.sandbox.localhost');
    // A name the certificate does not cover (and no domain routes to) gets no certificate at all.
    await expect(httpsGet(httpsPort, 'nothing.example.test', ca)).rejects.toThrow();
    // The API answers on the HTTPS port as well.
    expect((await httpsGet(httpsPort, 'api.sandbox.localhost', ca, '/healthz')).status).toBe(200);
  }, 120_000);

  it('launch with `domain` attaches it; it routes nowhere until verified, then reaches the app', async () => {
    const r = await t.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, domain: DOMAIN.toUpperCase() });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ status: 'running', domain: DOMAIN });
    expect(r.body.url).toMatch(/^https:\/\//);
    await waitServing(t, r.body.url);
    const m = await t.call('GET', `/machines/${r.body.machineId}`);
    expect(m.body.domains).toEqual([DOMAIN]);
    const d = await t.call('GET', `/domains/${DOMAIN}`);
    expect(d.body).toMatchObject({ verified: false, target: { kind: 'machine', id: r.body.machineId }, certificate: { status: 'unavailable' } });
    // Unverified: the Host reaches nothing (the API's 404), not the app.
    const early = await httpGet(httpPort, DOMAIN);
    expect(early.status).toBe(404);
    expect(early.body).not.toContain('machine at');
    const txt = d.body.records.find((x: { type: string }) => x.type === 'TXT');
    dns.txt.set(txt.name, [txt.value]);
    const v = await t.call('POST', `/domains/${DOMAIN}/verify`);
    expect(v.body.verified, JSON.stringify(v.body)).toBe(true);
    const ok = await until(() => httpGet(httpPort, DOMAIN), (x) => x.status === 200, 30_000);
    expect(ok.body).toBe(`machine at ${DOMAIN} via http`);
    // Another owner cannot take it, nor see it.
    const other = await t.nube.services.account.createAccount({ name: `o-${dialect}`, plan: 'tera' });
    const taken = await t.call('POST', '/domains', { domain: DOMAIN }, other.secret);
    expect(taken.status).toBe(409);
    const launchTaken = await t.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, domain: DOMAIN }, other.secret);
    expect(launchTaken.status).toBe(409);
    expect((await t.call('GET', '/machines', undefined, other.secret)).body.machines).toEqual([]);
    // Deleting the machine detaches the domain: it stays the owner's, verified, routing nowhere.
    expect((await t.call('DELETE', `/machines/${r.body.machineId}`)).status).toBe(200);
    const after = await t.call('GET', `/domains/${DOMAIN}`);
    expect(after.body).toMatchObject({ verified: true, target: { kind: 'none', id: null } });
    expect((await httpGet(httpPort, DOMAIN)).body).not.toContain('machine at');
  }, 300_000);
});
