// Custom domains for sites with certificates from a real ACME CA (Debian's pebble), end to end: add,
// verify through a local authoritative DNS server, HTTP and HTTPS (SNI) reach the site, the key is
// sealed at rest, renewal by the durable job, removal. Security: an unverified domain routes nowhere
// and gets no certificate; another owner cannot take a verified domain; Byte is refused.
import { X509Certificate, createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { zipOf } from '../helpers/site.js';
import { httpGet, httpsGet, httpsGetCert, until } from './clients.js';
import { startDns, type TestDns } from './dns.js';
import { freePort, type Pebble, startPebble } from './pebble.js';

describe.each(DIALECTS)('custom domains for sites with ACME certificates (%s)', (dialect) => {
  let t: TestNube;
  let dns: TestDns;
  let pebble: Pebble;
  let httpPort: number;
  let httpsPort: number;
  let siteId: string;
  let otherKey: string;
  let byteKey: string;
  const api = (method: string, path: string, body?: unknown, key?: string) => caller(t)(method, path, body, key);
  const DOMAIN = `shop-${dialect}.example.test`;

  beforeAll(async () => {
    dns = await startDns();
    httpPort = await freePort();
    pebble = await startPebble({ httpPort, dnsPort: dns.port });
    t = await startNube({
      dialect,
      env: {
        NUBE_PORT: String(httpPort),
        NUBE_OWNER_PLAN: 'mega',
        NUBE_HTTPS_PORT: '0',
        NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}`,
        NUBE_ACME_DIRECTORY_URL: pebble.directoryUrl,
        NUBE_ACME_CA_BUNDLE: pebble.caBundle,
        NUBE_ACME_EMAIL: 'ops@example.test',
      },
    });
    httpsPort = Number(new URL(t.nube.deps.httpsUrl()!).port);
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' })).secret;
    byteKey = (await t.nube.services.account.createAccount({ name: 'small', plan: 'byte' })).secret;
    const zip = await zipOf({ 'index.html': '<html><body>tienda en línea</body></html>' });
    const site = await json(await api('POST', '/websites', { archiveBase64: zip.toString('base64'), name: 'Shop' }));
    siteId = site.id;
    // HTTPS is on, but no certificate covers `*.sites.localhost`: the handed-out URL stays http://.
    expect(site.url).toMatch(/^http:\/\//);
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await pebble?.stop();
    dns?.close();
  });

  it('refuses bad names (400 with issues), nube hosts, and Byte (402)', async () => {
    const bad = await api('POST', '/domains', { domain: 'not a domain' });
    expect(bad.status).toBe(400);
    expect((await json(bad)).issues.length).toBeGreaterThan(0);
    expect((await api('POST', '/domains', { domain: 'x.sites.localhost' })).status).toBe(400);
    const byte = await api('POST', '/domains', { domain: 'byte.example.test' }, byteKey);
    expect(byte.status).toBe(402);
    expect((await json(byte)).code).toBe('PlanRequired');
  });

  it('an unverified domain routes nowhere and gets no certificate', async () => {
    const r = await api('POST', '/domains', { domain: DOMAIN, target: { kind: 'site', id: siteId } });
    expect(r.status).toBe(201);
    const d = await json(r);
    expect(d).toMatchObject({ domain: DOMAIN, verified: false, target: { kind: 'site', id: siteId }, certificate: { status: 'none' } });
    const txt = d.records.find((x: { type: string }) => x.type === 'TXT');
    expect(txt.name).toBe(`_nube-challenge.${DOMAIN}`);
    dns.a.add(DOMAIN);
    const visit = await httpGet(httpPort, DOMAIN);
    expect(visit.body).not.toContain('tienda');
    await expect(httpsGet(httpsPort, DOMAIN, await pebble.issuingRoot())).rejects.toThrow();
    // Wrong TXT: still unverified, with a reason; no certificate job.
    dns.txt.set(`_nube-challenge.${DOMAIN}`, ['something else']);
    const v = await json(await api('POST', `/domains/${DOMAIN}/verify`));
    expect(v.verified).toBe(false);
    expect(v.reason).toMatch(/does not hold/);
    const jobs = await t.nube.deps.store.db.selectFrom('jobs').select('type').where('type', '=', 'domains.certificate').execute();
    expect(jobs).toEqual([]);
    dns.txt.set(`_nube-challenge.${DOMAIN}`, [txt.value]);
  });

  it('a site of another owner is a 404 target; another owner may claim but not verify a taken domain', async () => {
    const other = await api('POST', '/domains', { domain: 'other.example.test', target: { kind: 'site', id: siteId } }, otherKey);
    expect(other.status).toBe(404);
    // Once verified by the owner (next), another account is refused.
    const v = await json(await api('POST', `/domains/${DOMAIN}/verify`));
    expect(v.verified).toBe(true);
    const take = await api('POST', '/domains', { domain: DOMAIN }, otherKey);
    expect(take.status).toBe(409);
    expect((await json(take)).code).toBe('DomainTaken');
    expect((await api('GET', `/domains/${DOMAIN}`, undefined, otherKey)).status).toBe(404);
    expect((await api('DELETE', `/domains/${DOMAIN}`, undefined, otherKey)).status).toBe(404);
  });

  it('once verified, HTTP reaches the site and pebble issues a certificate served by SNI', async () => {
    const visit = await httpGet(httpPort, DOMAIN);
    expect(visit.status).toBe(200);
    expect(visit.body).toContain('tienda en línea');
    const d = await until(
      async () => json(await api('GET', `/domains/${DOMAIN}`)),
      (x) => x.certificate.status === 'issued',
    );
    expect(d.certificate.status).toBe('issued');
    const root = await pebble.issuingRoot();
    const s = await httpsGet(httpsPort, DOMAIN, root);
    expect(s.status).toBe(200);
    expect(s.body).toContain('tienda en línea');
    expect(s.cert!.checkHost(DOMAIN)).toBe(DOMAIN);
    expect(new Date(s.cert!.validTo).toISOString()).toBe(d.certificate.notAfter.replace(/\.\d+Z$/, '.000Z'));
  }, 90_000);

  it('private keys are sealed at rest (certificate key and ACME account key)', async () => {
    const db = t.nube.deps.store.db;
    const row = await db.selectFrom('tls_certs').selectAll().where('domain', '=', DOMAIN).executeTakeFirstOrThrow();
    expect(row.key_sealed).not.toContain('PRIVATE KEY');
    const key = t.nube.deps.secretBox.open(row.key_sealed);
    expect(key).toContain('PRIVATE KEY');
    // The sealed key is the one matching the served certificate.
    const pub = createPublicKey(key).export({ type: 'spki', format: 'pem' });
    expect(new X509Certificate(row.cert_pem).publicKey.export({ type: 'spki', format: 'pem' })).toBe(pub);
    const accounts = await db.selectFrom('tls_acme_accounts').selectAll().execute();
    expect(accounts.length).toBe(1);
    for (const a of accounts) expect(a.key_sealed).not.toContain('PRIVATE KEY');
    const keyBody = key.split('\n')[1]!;
    for (const a of accounts) expect(a.key_sealed).not.toContain(keyBody);
  });

  it('the durable renewal job renews a certificate inside the 30-day window', async () => {
    const db = t.nube.deps.store.db;
    const before = await db.selectFrom('tls_certs').selectAll().where('domain', '=', DOMAIN).executeTakeFirstOrThrow();
    // Pretend it expires in 10 days, then run the scan now (it is armed as a durable job at start).
    await db.updateTable('tls_certs').set({ not_after: Date.now() + 10 * 86_400_000 }).where('domain', '=', DOMAIN).execute();
    await t.nube.deps.jobs.enqueue('domains.certificate-renewals', {}, { key: 'domains.certificate-renewals', onDuplicate: 'replace', runAt: Date.now() });
    const after = await until(
      () => db.selectFrom('tls_certs').selectAll().where('domain', '=', DOMAIN).executeTakeFirstOrThrow(),
      (r) => Number(r.issued_at) > Number(before.issued_at),
    );
    expect(Number(after.issued_at)).toBeGreaterThan(Number(before.issued_at));
    expect(new X509Certificate(after.cert_pem).serialNumber).not.toBe(new X509Certificate(before.cert_pem).serialNumber);
    // The scan re-armed itself for the next check.
    const next = await db.selectFrom('jobs').select(['status', 'run_at']).where('key', '=', 'domains.certificate-renewals').where('status', '=', 'queued').execute();
    expect(next.length).toBe(1);
    const s = await until(
      () => httpsGetCert(httpsPort, DOMAIN),
      (c) => c === new X509Certificate(after.cert_pem).serialNumber,
      70_000,
    );
    expect(s).toBe(new X509Certificate(after.cert_pem).serialNumber);
  }, 120_000);

  it('list shows the domain; removing it stops HTTP and HTTPS and drops the certificate', async () => {
    const list = await json(await api('GET', '/domains'));
    expect(list.domains.map((d: { domain: string }) => d.domain)).toContain(DOMAIN);
    expect((await api('DELETE', `/domains/${DOMAIN}`)).status).toBe(200);
    expect((await httpGet(httpPort, DOMAIN)).body).not.toContain('tienda');
    await expect(httpsGet(httpsPort, DOMAIN, await pebble.issuingRoot())).rejects.toThrow();
    expect(await t.nube.deps.store.db.selectFrom('tls_certs').selectAll().where('domain', '=', DOMAIN).execute()).toEqual([]);
    expect((await api('GET', `/domains/${DOMAIN}`)).status).toBe(404);
  });
});
