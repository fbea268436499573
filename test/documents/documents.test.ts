import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json } from '../helpers/server.js';
import { siteRequest } from '../helpers/site.js';
import { type DocsNube, redPng, startDocsNube } from './helpers.js';

const SECTIONS = [
  { id: 'intro', heading: '¿Qué es nube?', body: 'Una **nube** para agentes. ¡Año nuevo, señor Muñoz!' },
  { title: 'Precios', content: '| plan | MXN |\n|---|---|\n| Mega | 299 |' },
  {
    heading: 'HTML',
    format: 'html',
    body: '<p onclick="steal()">hola <a href="javascript:alert(1)">x</a></p><script>alert(1)</script><style>body{display:none}</style><iframe src="https://example.com"></iframe>',
  },
];

describe.each(DIALECTS)('documents (%s)', (dialect) => {
  let t: DocsNube;
  beforeAll(async () => {
    t = await startDocsNube(dialect);
  });
  afterAll(async () => {
    await t?.close();
  });

  it('creates a document whose pages are sanitized HTML in its theme', async () => {
    const r = await t.api('POST', '/documents', {
      name: 'Guía',
      theme: 'modern',
      customColors: { primary: '#ff0066' },
      sections: SECTIONS,
    });
    expect(r.status).toBe(200);
    const { document } = await json(r);
    expect(document).toMatchObject({
      name: 'Guía',
      theme: 'modern',
      status: 'draft',
      url: null,
      pageCount: 3,
      customColors: { primary: '#ff0066' },
    });
    expect(document.sections.map((s: { id: string }) => s.id)).toEqual(['intro', 's1', 's2']);
    expect(document.sections[1]).toMatchObject({ heading: 'Precios' });

    const got = await json(await t.api('GET', `/documents/${document.id}`));
    expect(got.pages.map((p: { id: string }) => p.id)).toEqual(['pg_intro', 'pg_s1', 'pg_s2']);
    expect(got.pages[0]).toMatchObject({ index: 0, sectionId: 'intro', title: '¿Qué es nube?' });
    const [intro, prices, raw] = got.pages.map((p: { html: string }) => p.html);
    expect(intro).toContain('<strong>nube</strong>');
    expect(intro).toContain('¡Año nuevo, señor Muñoz!');
    expect(intro).toContain('data-page-id="pg_intro"');
    expect(intro).toContain('--color-primary:#ff0066');
    expect(prices).toContain('<table>');
    expect(raw).toContain('hola');
    for (const bad of ['<script', 'onclick', 'javascript:', '<iframe', 'display:none'])
      expect(raw).not.toContain(bad);
    // The one <style> is the theme's, in the head.
    expect(raw.match(/<style>/g)).toHaveLength(1);
  });

  it('refuses bad input with 400 and names the LLM setting for prompt-only documents', async () => {
    const post = (body: unknown) => t.api('POST', '/documents', body);
    expect((await post({ name: 'x', theme: 'neon' })).status).toBe(400);
    const color = await post({ name: 'x', customColors: { primary: 'red;}body{background:url(http://x)' } });
    expect(color.status).toBe(400);
    expect((await json(color)).issues[0].path).toEqual(['body', 'customColors', 'primary']);
    expect((await post({ name: 'x', sections: [{ id: 'a' }, { id: 'a' }] })).status).toBe(400);
    expect((await post({ name: 'x', metadata: { format: 'B5' } })).status).toBe(400);
    const prompt = await post({ name: 'x', prompt: 'Una landing para una panadería' });
    expect(prompt.status).toBe(400);
    const body = await json(prompt);
    expect(body.code).toBe('LlmNotConfigured');
    expect(body.error).toContain('NUBE_LLM_BASE_URL');
    // A prompt with sections is fine: the pages come from the sections.
    expect((await post({ name: 'x', prompt: 'p', sections: [{ body: 'a' }] })).status).toBe(200);
    const other = await t.nube.services.account.createAccount({ name: 'o', plan: 'mega' });
    const theirs = await t.upload('r.png', await redPng(), 'image/png', other.secret);
    const img = await post({ name: 'x', sections: [{ body: 'a', images: [{ fileId: theirs }] }] });
    expect(img.status).toBe(400);
    expect(await json(img)).toMatchObject({
      code: 'ImageNotFound',
      issues: [{ path: ['body', 'sections', 0, 'images', 0, 'fileId'] }],
    });
  });

  it('lists, patches and deletes; another owner sees nothing', async () => {
    const { document } = await json(
      await t.api('POST', '/documents', { name: 'Borrador', sections: [{ body: 'uno' }] }),
    );
    const patched = await json(
      await t.api('PATCH', `/documents/${document.id}`, {
        name: 'Final',
        theme: 'dark',
        sections: [{ body: 'dos' }, { body: 'tres' }],
      }),
    );
    expect(patched).toMatchObject({ name: 'Final', theme: 'dark', pageCount: 2 });
    expect(patched.pages[1].html).toContain('tres');
    const list = await json(await t.api('GET', '/documents'));
    expect(list.items.find((d: { id: string }) => d.id === document.id)).toMatchObject({ name: 'Final' });
    expect(list.items[0].pages).toBeUndefined();
    const other = await t.nube.services.account.createAccount({ name: 'o2', plan: 'mega' });
    for (const [m, p] of [
      ['GET', ''],
      ['PATCH', ''],
      ['DELETE', ''],
      ['POST', '/deploy'],
      ['POST', '/unpublish'],
      ['GET', '/pdf'],
    ] as const) {
      const r = await t.api(
        m,
        `/documents/${document.id}${p}`,
        m === 'PATCH' ? { name: 'z' } : undefined,
        other.secret,
      );
      expect(r.status, `${m} ${p}`).toBe(404);
    }
    expect((await t.api('DELETE', `/documents/${document.id}`)).status).toBe(200);
    expect((await t.api('GET', `/documents/${document.id}`)).status).toBe(404);
  });

  it('deploys to a site at its slug, redeploys in place, unpublishes to 404 and back', async () => {
    const empty = await json(await t.api('POST', '/documents', { name: 'Vacío' }));
    const none = await t.api('POST', `/documents/${empty.document.id}/deploy`);
    expect([none.status, (await json(none)).code]).toEqual([400, 'DocumentHasNoPages']);

    const image = await t.upload('logo.png', await redPng(), 'image/png');
    const { document } = await json(
      await t.api('POST', '/documents', {
        name: 'Panadería Año Nuevo',
        sections: [{ heading: 'Bienvenidos', body: 'Pan dulce', images: [{ fileId: image, alt: 'logo' }] }],
      }),
    );
    const started = Date.now();
    const d = await t.api('POST', `/documents/${document.id}/deploy`);
    expect(d.status).toBe(200);
    const site = await json(d);
    expect(site.slug).toMatch(/^panaderia-ano-nuevo-[a-z0-9]{6}$/);
    expect(site.url).toBe(`http://${site.slug}.sites.localhost:${new URL(t.baseUrl).port}`);
    const home = await siteRequest(site.url, t.baseUrl, '/');
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(home.status).toBe(200);
    expect(home.text).toContain('Bienvenidos');
    expect(home.text).not.toContain('made with nube');
    const logo = await siteRequest(site.url, t.baseUrl, `/assets/${image}`);
    expect([logo.status, logo.headers['content-type']]).toEqual([200, 'image/png']);
    expect(home.text).toContain(`src="assets/${image}"`);
    expect(await json(await t.api('GET', `/documents/${document.id}`))).toMatchObject({
      status: 'published',
      url: site.url,
      websiteId: site.websiteId,
      slug: site.slug,
    });
    const listed = (await json(await t.api('GET', '/websites'))).items.find(
      (w: { id: string }) => w.id === site.websiteId,
    );
    expect(listed).toMatchObject({ source: 'document', documentId: document.id, slug: site.slug });
    expect(t.events.some((e) => e.event === 'website.created' && e.data.id === site.websiteId)).toBe(true);

    await t.api('PATCH', `/documents/${document.id}`, { sections: [{ heading: 'Ahora con conchas' }] });
    const again = await json(await t.api('POST', `/documents/${document.id}/deploy`));
    expect(again).toEqual(site);
    expect((await siteRequest(site.url, t.baseUrl, '/')).text).toContain('Ahora con conchas');
    expect((await siteRequest(site.url, t.baseUrl, `/assets/${image}`)).status).toBe(404);

    expect((await t.api('POST', `/documents/${document.id}/unpublish`)).status).toBe(200);
    expect((await siteRequest(site.url, t.baseUrl, '/')).status).toBe(404);
    expect(await json(await t.api('GET', `/documents/${document.id}`))).toMatchObject({
      status: 'draft',
      url: null,
      websiteId: null,
    });
    expect(t.events.some((e) => e.event === 'website.deleted' && e.data.id === site.websiteId)).toBe(true);

    const back = await json(await t.api('POST', `/documents/${document.id}/deploy`));
    expect(back.slug).toBe(site.slug);
    expect((await siteRequest(site.url, t.baseUrl, '/')).status).toBe(200);
    // Deleting the site through /websites takes the document back to draft.
    expect((await t.api('DELETE', `/websites/${back.websiteId}`)).status).toBe(200);
    expect((await json(await t.api('GET', `/documents/${document.id}`))).status).toBe('draft');
    // Deleting a published document takes its site down.
    const last = await json(await t.api('POST', `/documents/${document.id}/deploy`));
    expect((await t.api('DELETE', `/documents/${document.id}`)).status).toBe(200);
    expect((await siteRequest(last.url, t.baseUrl, '/')).status).toBe(404);
    expect((await t.api('GET', `/websites/${last.websiteId}`)).status).toBe(404);
  });

  it('shows a "made with nube" badge on Byte sites, none on Mega', async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'b', plan: 'byte' });
    const mk = async (key?: string) => {
      const { document } = await json(
        await t.api('POST', '/documents', { name: 'Landing', sections: [{ body: 'hola' }] }, key),
      );
      return json(await t.api('POST', `/documents/${document.id}/deploy`, undefined, key));
    };
    const byteSite = await mk(byte.secret);
    const page = await siteRequest(byteSite.url, t.baseUrl, '/');
    expect(page.text).toContain('made with nube');
    expect(page.text.indexOf('made with nube')).toBeLessThan(page.text.lastIndexOf('</body>'));
    expect(page.headers.etag).toMatch(/-b"$/);
    const megaSite = await mk();
    expect((await siteRequest(megaSite.url, t.baseUrl, '/')).text).not.toContain('made with nube');
  });

  it('works over MCP too: create, deploy, list websites, PDF as base64', async () => {
    const call = async (name: string, args: Record<string, unknown>) => {
      const r = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: {
          ...t.auth,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name, arguments: args },
        }),
      });
      return (await json(r)).result;
    };
    const created = await call('documents_create', { name: 'Vía MCP', sections: [{ heading: '¡Hola!' }] });
    expect(created.isError).toBe(false);
    const id = created.structuredContent.document.id;
    const deployed = await call('documents_deploy', { id });
    expect(deployed.structuredContent).toMatchObject({ slug: expect.stringMatching(/^via-mcp-/) });
    expect((await siteRequest(deployed.structuredContent.url, t.baseUrl, '/')).text).toContain('¡Hola!');
    const sites = await call('websites_list', {});
    expect(sites.structuredContent.items.some((w: { documentId: string }) => w.documentId === id)).toBe(true);
    const pdf = await call('documents_pdf', { id });
    expect(pdf.isError).toBe(false);
    const b64 = /base64: (.+)$/.exec(pdf.content[0].text)?.[1] as string;
    expect(Buffer.from(b64, 'base64').subarray(0, 5).toString()).toBe('%PDF-');
  });

  it("counts sites against the plan's storage: in /account/usage, and 402 past the allowance", async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'lleno', plan: 'byte' });
    const usage = async () =>
      (await json(await t.api('GET', '/account/usage', undefined, byte.secret))).storageBytes.used;
    const { document: small } = await json(
      await t.api('POST', '/documents', { name: 'Chico', sections: [{ body: 'hola' }] }, byte.secret),
    );
    const before = await usage();
    const site = await json(await t.api('POST', `/documents/${small.id}/deploy`, undefined, byte.secret));
    const listed = await json(await t.api('GET', `/websites/${site.websiteId}`, undefined, byte.secret));
    expect(listed.totalBytes).toBeGreaterThan(0);
    expect(await usage()).toBe(before + listed.totalBytes);

    // A 60 MB image is stored once as a file; its copy in the site would pass Byte's 100 MB.
    const big = await t.upload('grande.png', Buffer.alloc(60 * 1024 * 1024, 1), 'image/png', byte.secret);
    const { document } = await json(
      await t.api(
        'POST',
        '/documents',
        { name: 'Grande', sections: [{ images: [{ fileId: big }] }] },
        byte.secret,
      ),
    );
    const r = await t.api('POST', `/documents/${document.id}/deploy`, undefined, byte.secret);
    expect(r.status).toBe(402);
    expect((await json(r)).code).toBe('StorageQuotaExceeded');
    expect((await json(await t.api('GET', `/documents/${document.id}`, undefined, byte.secret))).status).toBe(
      'draft',
    );
  });

  it('leaves one site on the air when the same document is deployed twice at once', async () => {
    const { document } = await json(
      await t.api('POST', '/documents', { name: 'Carrera', sections: [{ body: 'uno' }] }),
    );
    const answers = await Promise.all([1, 2, 3].map(() => t.api('POST', `/documents/${document.id}/deploy`)));
    const ok = answers.filter((r) => r.status === 200);
    expect(ok.length).toBeGreaterThan(0);
    for (const r of answers) expect([200, 409]).toContain(r.status);
    const sites = (await json(await t.api('GET', '/websites'))).items.filter(
      (w: { documentId: string }) => w.documentId === document.id,
    );
    expect(sites).toHaveLength(1);
    const doc = await json(await t.api('GET', `/documents/${document.id}`));
    expect(doc.websiteId).toBe(sites[0].id);
    expect((await siteRequest(doc.url, t.baseUrl, '/')).status).toBe(200);
  });
});
