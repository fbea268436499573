import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusEvent } from '../../src/platform/events.js';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { siteRequest, tarOf, zipOf } from '../helpers/site.js';
import { FAST, verify } from '../webhooks/helpers.js';
import { startReceiver } from '../webhooks/receiver.js';

const SITE = {
  'index.html':
    '<!doctype html><html><head><title>Hola</title></head><body><h1>Página de inicio</h1></body></html>',
  'style.css': 'body { color: #333 }',
  'app.js': 'console.log(1)',
  'img/logo.svg': '<svg xmlns="http://www.w3.org/2000/svg"/>',
  'about/index.html': '<html><body>Acerca de</body></html>',
  'contact.html': '<html><body>Contacto</body></html>',
  '404.html': '<html><body>Nada por aquí</body></html>',
};

describe.each(DIALECTS)('websites (%s)', (dialect) => {
  let t: TestNube;
  let events: BusEvent[];
  const api = (method: string, path: string, body?: unknown, key?: string) =>
    caller(t)(method, path, body, key);
  const publish = async (
    files: Record<string, string | Buffer>,
    extra: Record<string, unknown> = {},
    key?: string,
  ) => api('POST', '/websites', { archiveBase64: (await zipOf(files)).toString('base64'), ...extra }, key);

  beforeAll(async () => {
    t = await startNube({ dialect, env: { ...FAST, NUBE_OWNER_PLAN: 'mega' } });
    events = [];
    t.nube.deps.bus.subscribe((e) => {
      events.push(e);
    });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('publishes a zip at its slug and serves it with types, index.html, 404.html, ETag and cache headers', async () => {
    const r = await publish(SITE, { name: 'Mi sitio', slug: 'mi-sitio' });
    expect(r.status).toBe(201);
    const site = await json(r);
    expect(site).toMatchObject({
      slug: 'mi-sitio',
      name: 'Mi sitio',
      source: 'archive',
      documentId: null,
      fileCount: 7,
    });
    const port = new URL(t.baseUrl).port;
    expect(site.url).toBe(`http://mi-sitio.sites.localhost:${port}`);
    expect(events.find((e) => e.event === 'website.created')?.data).toMatchObject({
      id: site.id,
      slug: 'mi-sitio',
    });

    const home = await siteRequest(site.url, t.baseUrl, '/');
    expect(home.status).toBe(200);
    expect(home.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(home.text).toContain('Página de inicio');
    expect(home.text).not.toContain('made with nube');
    expect(home.headers['cache-control']).toBe('no-cache');
    const etag = home.headers.etag as string;
    expect(etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect((await siteRequest(site.url, t.baseUrl, '/', { headers: { 'if-none-match': etag } })).status).toBe(
      304,
    );
    expect((await siteRequest(site.url, t.baseUrl, '/index.html')).text).toBe(home.text);

    const types: Record<string, string> = {
      '/style.css': 'text/css; charset=utf-8',
      '/app.js': 'text/javascript; charset=utf-8',
      '/img/logo.svg': 'image/svg+xml; charset=utf-8',
    };
    for (const [path, type] of Object.entries(types)) {
      const res = await siteRequest(site.url, t.baseUrl, path);
      expect([res.status, res.headers['content-type']], path).toEqual([200, type]);
      expect(res.headers['cache-control']).toBe('public, max-age=60');
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
    // A file past the in-memory cache size streams from the store, whole and with its length.
    const big = await json(
      await publish({ 'index.html': 'x', 'video/clip.mp4': Buffer.alloc(3 * 1024 * 1024 + 7, 7) }),
    );
    const clip = await siteRequest(big.url, t.baseUrl, '/video/clip.mp4');
    expect([
      clip.status,
      clip.headers['content-type'],
      clip.headers['content-length'],
      clip.body.length,
    ]).toEqual([200, 'video/mp4', String(3 * 1024 * 1024 + 7), 3 * 1024 * 1024 + 7]);
    expect(clip.body.every((b) => b === 7)).toBe(true);
    const clipHead = await siteRequest(big.url, t.baseUrl, '/video/clip.mp4', { method: 'HEAD' });
    expect([clipHead.status, clipHead.body.length]).toEqual([200, 0]);

    const about = await siteRequest(site.url, t.baseUrl, '/about');
    expect([about.status, about.headers.location]).toEqual([301, '/about/']);
    expect((await siteRequest(site.url, t.baseUrl, '/about/')).text).toContain('Acerca de');
    expect((await siteRequest(site.url, t.baseUrl, '/contact')).text).toContain('Contacto');
    const missing = await siteRequest(site.url, t.baseUrl, '/no/such/page?x=1');
    expect(missing.status).toBe(404);
    expect(missing.text).toContain('Nada por aquí');
    const head = await siteRequest(site.url, t.baseUrl, '/', { method: 'HEAD' });
    expect([head.status, head.body.length, head.headers['content-length']]).toEqual([
      200,
      0,
      String(home.body.length),
    ]);
    const post = await siteRequest(site.url, t.baseUrl, '/', { method: 'POST' });
    expect([post.status, post.headers.allow]).toEqual([405, 'GET, HEAD']);
    // The API on the same listener is untouched by the host router.
    expect((await api('GET', `/websites/${site.id}`)).status).toBe(200);
  });

  it('never leaves the site: traversal in requests or archives', async () => {
    const site = await json(await publish(SITE, { slug: 'trav' }));
    for (const path of [
      '/../../etc/passwd',
      '/%2e%2e/%2e%2e/etc/passwd',
      '/..%2f..%2fetc%2fpasswd',
      '/%00',
      '/%ZZ',
    ]) {
      const res = await siteRequest(site.url, t.baseUrl, path);
      // Fastify refuses malformed percent-encoding with 400 before any hook; everything else is a 404.
      expect(res.status, path).toBe(path === '/%ZZ' ? 400 : 404);
      expect(res.text).not.toContain('root:');
    }
    const hostile: [string, Awaited<ReturnType<typeof tarOf>>][] = [
      [
        'dotdot',
        await tarOf([
          { name: 'index.html', content: 'x' },
          { name: '../evil.html', content: 'x' },
        ]),
      ],
      [
        'absolute',
        await tarOf([
          { name: 'index.html', content: 'x' },
          { name: '/etc/evil', content: 'x' },
        ]),
      ],
      [
        'symlink',
        await tarOf([
          { name: 'index.html', content: 'x' },
          { name: 'passwd', type: 'symlink' },
        ]),
      ],
      [
        'backslash',
        await tarOf([
          { name: 'index.html', content: 'x' },
          { name: '..\\evil', content: 'x' },
        ]),
      ],
      ['no index', await tarOf([{ name: 'page.html', content: 'x' }])],
      ['not an archive', Buffer.from('hello, not an archive at all')],
    ];
    for (const [what, archive] of hostile) {
      const res = await api('POST', '/websites', { archiveBase64: archive.toString('base64') });
      expect(res.status, what).toBe(400);
      expect((await json(res)).code, what).toMatch(/InvalidArchive|SiteHasNoIndex/);
    }
  });

  it('publishes a tar.gz from the files area, unwrapping its single top folder', async () => {
    const archive = await tarOf([
      { name: 'build/', type: 'directory' },
      { name: 'build/index.html', content: '<p>desde un tar</p>' },
      { name: 'build/js/main.js', content: 'x' },
    ]);
    const created = await json(
      await api('POST', '/files', {
        fileName: 'site.tar.gz',
        contentType: 'application/gzip',
        size: archive.length,
      }),
    );
    expect((await fetch(created.putUrl, { method: 'PUT', body: archive })).status).toBe(200);
    const r = await api('POST', '/websites', { fileId: created.file.id, name: 'Tarball' });
    expect(r.status).toBe(201);
    const site = await json(r);
    expect(site.slug).toMatch(/^tarball-[a-z0-9]{6}$/);
    expect((await siteRequest(site.url, t.baseUrl, '/')).text).toBe('<p>desde un tar</p>');
    expect((await siteRequest(site.url, t.baseUrl, '/js/main.js')).status).toBe(200);
  });

  it('redeploys in place; lists, gets and deletes (then the host answers 404)', async () => {
    const site = await json(await publish(SITE, { slug: 'cambia' }));
    const before = await siteRequest(site.url, t.baseUrl, '/');
    const d = await api('POST', `/websites/${site.id}/deploy`, {
      archiveBase64: (
        await zipOf({ 'index.html': '<p>versión 2</p>', 'style.css': SITE['style.css'] })
      ).toString('base64'),
    });
    expect(d.status).toBe(200);
    expect(await json(d)).toMatchObject({ id: site.id, slug: 'cambia', fileCount: 2 });
    const after = await siteRequest(site.url, t.baseUrl, '/');
    expect(after.text).toBe('<p>versión 2</p>');
    expect(after.headers.etag).not.toBe(before.headers.etag);
    expect((await siteRequest(site.url, t.baseUrl, '/contact')).status).toBe(404);
    // Only the new version's contents stay stored.
    const keys: string[] = [];
    for await (const e of t.nube.services.files.stores.at().list(`sites/${site.id}/`)) keys.push(e.key);
    expect(keys).toHaveLength(2);

    const list = await json(await api('GET', '/websites'));
    expect(list.items.map((w: { id: string }) => w.id)).toContain(site.id);
    expect(await json(await api('GET', `/websites/${site.id}`))).toMatchObject({
      slug: 'cambia',
      url: site.url,
    });
    expect((await api('DELETE', `/websites/${site.id}`)).status).toBe(200);
    expect((await siteRequest(site.url, t.baseUrl, '/')).status).toBe(404);
    expect((await api('GET', `/websites/${site.id}`)).status).toBe(404);
    expect(events.find((e) => e.event === 'website.deleted')?.data).toMatchObject({ id: site.id });
    const left: string[] = [];
    for await (const e of t.nube.services.files.stores.at().list(`sites/${site.id}/`)) left.push(e.key);
    expect(left).toEqual([]);
  });

  it('guards slugs, plans and owners', async () => {
    await publish(SITE, { slug: 'unico' });
    expect((await publish(SITE, { slug: 'unico' })).status).toBe(409);
    for (const slug of ['Mayus', '-x', 'a_b', 'www', 'x'.repeat(64)])
      expect((await publish(SITE, { slug })).status, slug).toBe(400);
    expect((await api('POST', '/websites', { name: 'no archive' })).status).toBe(400);

    const byte = await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' });
    const r = await publish(SITE, {}, byte.secret);
    expect(r.status).toBe(402);
    expect((await json(r)).code).toBe('PlanUpgradeRequired');

    const other = await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' });
    const mine = await json(await publish(SITE, {}));
    expect((await api('GET', `/websites/${mine.id}`, undefined, other.secret)).status).toBe(404);
    expect((await api('DELETE', `/websites/${mine.id}`, undefined, other.secret)).status).toBe(404);
    expect((await json(await api('GET', '/websites', undefined, other.secret))).items).toEqual([]);
  });

  it('delivers website.created and website.deleted to webhooks, signed, with the website as data', async () => {
    const rx = await startReceiver();
    try {
      const hook = await json(
        await api('POST', '/webhooks', { url: rx.url, events: ['website.created', 'website.deleted'] }),
      );
      const site = await json(await publish(SITE, { slug: 'con-webhook' }));
      await api('DELETE', `/websites/${site.id}`);
      const got = await rx.waitFor(2);
      const bodies = got.map((g) => JSON.parse(g.raw));
      expect(bodies.map((b) => b.event).sort()).toEqual(['website.created', 'website.deleted']);
      for (const b of bodies)
        expect(b.data).toMatchObject({ id: site.id, slug: 'con-webhook', url: site.url, source: 'archive' });
      for (const g of got) expect(verify(hook.secret, g.raw, g.headers['x-service-signature'])).toBe(true);
    } finally {
      await rx.close();
    }
  });
});
