// A site's verified custom domain is one of its own origins for forms: posts from pages served there
// are taken (with CORS for that origin), on the domain itself and on nube's host, and `_redirect` may
// point there; the same domain unverified, or verified for another site, is not.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDns, type TestDns } from '../domains/dns.js';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { zipOf } from '../helpers/site.js';
import { send, URLENCODED } from './helpers.js';

const DOMAIN = 'www.panaderia-forms.test';
const OTHER = 'www.otro-forms.test';

describe.each(DIALECTS)('forms on a custom domain (%s)', (dialect) => {
  let t: TestNube;
  let dns: TestDns;
  let slug: string;
  let n = 10;
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await caller(t)(method, path, body);
    return { status: r.status, body: await json(r) };
  };
  const publish = async (s: string) => {
    const archive = await zipOf({ 'index.html': '<form data-nube-form="pedido"><input name="pan"></form>' });
    const r = await api('POST', '/websites', {
      slug: `${s}-${dialect}`,
      archiveBase64: archive.toString('base64'),
    });
    expect(r.status).toBe(201);
    return r.body as { id: string; slug: string };
  };
  const claim = async (domain: string, siteId: string, verify: boolean) => {
    const d = await api('POST', '/domains', { domain, target: { kind: 'site', id: siteId } });
    expect(d.status).toBe(201);
    if (!verify) return;
    const txt = d.body.records.find((x: { type: string }) => x.type === 'TXT');
    dns.txt.set(txt.name, [txt.value]);
    expect((await api('POST', `/domains/${domain}/verify`)).body.verified).toBe(true);
  };
  const post = (path: string, host: string | undefined, origin: string, body = 'pan=concha') =>
    send(t.baseUrl, {
      path,
      host,
      body,
      headers: { ...URLENCODED, accept: 'application/json', origin },
      from: `127.0.0.${n++}`,
    });

  beforeAll(async () => {
    dns = await startDns();
    t = await startNube({
      dialect,
      env: { NUBE_OWNER_PLAN: 'mega', NUBE_DNS_SERVERS: `127.0.0.1:${dns.port}` },
    });
    const site = await publish('panaderia');
    slug = site.slug;
    const other = await publish('otro');
    await claim(DOMAIN, site.id, true);
    await claim(OTHER, other.id, true);
    await claim('www.pendiente-forms.test', site.id, false);
  });
  afterAll(async () => {
    await t?.close();
    dns?.close();
  });

  it("takes posts from the site's verified domain, on the domain and on nube's host", async () => {
    const origin = `http://${DOMAIN}`;
    const onDomain = await post('/f/pedido', DOMAIN, origin);
    expect(onDomain.status, onDomain.text).toBe(200);
    expect(onDomain.headers['access-control-allow-origin']).toBe(origin);
    const onNube = await post(`/f/${slug}/pedido`, undefined, `https://${DOMAIN}`);
    expect(onNube.status, onNube.text).toBe(200);
    expect(onNube.headers['access-control-allow-origin']).toBe(`https://${DOMAIN}`);
    const back = await send(t.baseUrl, {
      path: '/f/pedido',
      host: DOMAIN,
      body: `pan=bolillo&_redirect=${encodeURIComponent(`https://${DOMAIN}/gracias`)}`,
      headers: { ...URLENCODED, origin },
      from: `127.0.0.${n++}`,
    });
    expect(back.status).toBe(303);
    expect(back.headers.location).toBe(`https://${DOMAIN}/gracias`);
  });

  it("refuses another site's domain and an unverified one", async () => {
    for (const origin of [`http://${OTHER}`, 'http://www.pendiente-forms.test']) {
      const r = await post(`/f/${slug}/pedido`, undefined, origin);
      expect(r.status, origin).toBe(403);
      expect(r.headers['access-control-allow-origin']).toBeUndefined();
    }
    const list = (await api('GET', '/forms')).body.items;
    const pedido = list.find((f: { siteSlug: string }) => f.siteSlug === slug);
    expect(pedido.submissionCount).toBe(3);
  });
});
