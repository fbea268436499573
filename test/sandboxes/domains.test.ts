// Custom domains on a sandbox port, verified through a local authoritative DNS server (real DNS over
// UDP, started here): add answers the records, verify reads the TXT, then HTTP with that Host reaches
// the port; an unverified domain routes nowhere; another owner cannot take a verified domain; Byte is
// refused; remove stops the routing.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDns, type TestDns } from '../domains/dns.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until } from './helpers.js';

function get(port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    r.on('error', reject);
    r.end();
  });
}

describe.each(DRIVERS)('%s: custom domains', (driver) => {
  let t: SandboxNube;
  let id: string;
  let apiPort: number;
  let dns: TestDns;
  let records: Map<string, string[]>;

  beforeAll(async () => {
    dns = await startDns();
    records = dns.txt;
    t = await startSandboxNube('domains', { NUBE_SANDBOX_DRIVER: driver, NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}` });
    apiPort = Number(new URL(t.baseUrl).port);
    id = (await t.call('POST', '/sandboxes', { timeoutSeconds: 600 })).body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/www/index.html', content: 'custom domain' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 -m http.server 8080 --bind 0.0.0.0', cwd: '/root/www' });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    dns?.close();
  }, 120_000);

  it('add answers the records; an unverified domain routes nowhere; verify reads the TXT; then HTTP reaches the port', async () => {
    const a = await t.call('POST', `/sandboxes/${id}/domain-add`, { domain: 'App.Example.TEST', port: 8080 });
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(a.body).toMatchObject({ domain: 'app.example.test', port: 8080, verified: false });
    const txt = a.body.records.find((r: { type: string }) => r.type === 'TXT');
    expect(txt.name).toBe('_nube-challenge.app.example.test');
    expect(a.body.records.find((r: { type: string }) => r.type === 'CNAME').value).toBe('sandbox.localhost');
    expect((await get(apiPort, 'app.example.test')).status).toBe(404);
    const early = await t.call('POST', `/sandboxes/${id}/domain-verify`, { domain: 'app.example.test' });
    expect(early.body).toMatchObject({ verified: false, reason: expect.stringMatching(/^no TXT record found at _nube-challenge\./) });
    records.set('_nube-challenge.app.example.test', ['unrelated', txt.value]);
    const v = await t.call('POST', `/sandboxes/${id}/domain-verify`, { domain: 'app.example.test' });
    expect(v.body.verified).toBe(true);
    const r = await until(() => get(apiPort, 'app.example.test'), (x) => x.status === 200, 30_000);
    expect(r).toEqual({ status: 200, body: 'custom domain' });
    expect((await t.call('POST', `/sandboxes/${id}/domain-list`)).body.domains.map((d: { domain: string }) => d.domain)).toEqual([
      'app.example.test',
    ]);
  }, 120_000);

  it('another owner cannot take a verified domain; Byte has no custom domains; bad names are 400', async () => {
    const other = await t.nube.services.account.createAccount({ name: `o-${driver}`, plan: 'tera' });
    const h = { authorization: `Bearer ${other.secret}` };
    const theirs = (await t.call('POST', '/sandboxes', { timeoutSeconds: 600 }, h)).body.id;
    const taken = await t.call('POST', `/sandboxes/${theirs}/domain-add`, { domain: 'app.example.test', port: 80 }, h);
    expect(taken.status).toBe(409);
    expect(taken.body.code).toBe('DomainTaken');
    expect((await t.call('POST', `/sandboxes/${id}/domain-remove`, { domain: 'app.example.test' }, h)).status).toBe(404);
    const byte = await t.nube.services.account.createAccount({ name: `b-${driver}`, plan: 'byte' });
    const hb = { authorization: `Bearer ${byte.secret}` };
    const small = (await t.call('POST', '/sandboxes', { timeoutSeconds: 600 }, hb)).body.id;
    const refused = await t.call('POST', `/sandboxes/${small}/domain-add`, { domain: 'byte.example.test' }, hb);
    expect(refused.status).toBe(402);
    for (const domain of ['nodot', 'a..b.test', '-x.test', 'x.sandbox.localhost']) {
      const r = await t.call('POST', `/sandboxes/${id}/domain-add`, { domain });
      expect(r.status, domain).toBe(400);
    }
  }, 120_000);

  it('routes survive a restart of nube; remove stops the routing', async () => {
    await t.nube.close();
    const t2 = await startSandboxNube(
      'domains',
      { NUBE_SANDBOX_DRIVER: driver, NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}`, NUBE_OWNER_KEY: t.ownerKey },
      t.dataDir,
    );
    Object.assign(t, { ...t2 });
    apiPort = Number(new URL(t.baseUrl).port);
    expect((await until(() => get(apiPort, 'app.example.test'), (x) => x.status === 200, 30_000)).body).toBe('custom domain');
    expect((await t.call('POST', `/sandboxes/${id}/domain-remove`, { domain: 'app.example.test' })).status).toBe(200);
    expect((await get(apiPort, 'app.example.test')).status).toBe(404);
  }, 180_000);
});
