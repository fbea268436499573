// A document's `form` section: rendered into the deployed site as a form nube serves with its action,
// visitors' submissions stored like any site's; bad form sections are 400s; an unpublished document's
// form is 404; files past the owner's storage allowance are refused in words (402), on both stores.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { siteRequest } from '../helpers/site.js';
import { FAST } from '../webhooks/helpers.js';
import { multipart, send, URLENCODED } from './helpers.js';

const RSVP = {
  kind: 'form',
  heading: 'Confirma',
  body: 'Dinos si vienes.',
  form: {
    name: 'rsvp',
    submitLabel: 'Confirmar <ya>',
    fields: [
      { name: 'nombre', label: 'Nombre "completo"', required: true },
      { name: 'correo', type: 'email', required: true },
      { name: 'mensaje', type: 'textarea', placeholder: '<script>alert(1)</script>' },
      { name: 'invitados', type: 'number' },
      { name: 'menu', type: 'select', options: ['carne', 'vegetariano'] },
      { name: 'acepto', type: 'checkbox', label: 'Acepto' },
    ],
  },
};

describe.each(DIALECTS)('document form sections (%s)', (dialect) => {
  let t: TestNube;
  let n = 100;
  const api = (method: string, path: string, body?: unknown, key?: string) =>
    caller(t)(method, path, body, key);

  beforeAll(async () => {
    t = await startNube({ dialect, env: { ...FAST, NUBE_OWNER_PLAN: 'byte' } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('refuses malformed form sections with 400 and issues', async () => {
    const bad = [
      { kind: 'form' },
      { form: RSVP.form },
      { kind: 'form', form: { ...RSVP.form, name: '../x' } },
      { kind: 'form', form: { ...RSVP.form, fields: [] } },
      { kind: 'form', form: { ...RSVP.form, fields: [{ name: 'a', type: 'select' }] } },
      { kind: 'form', form: { ...RSVP.form, fields: [{ name: 'a', options: ['x'] }] } },
      { kind: 'form', form: { ...RSVP.form, fields: [{ name: 'a' }, { name: 'a' }] } },
      { kind: 'form', form: { ...RSVP.form, fields: [{ name: '_gotcha' }] } },
      { kind: 'form', form: { ...RSVP.form, fields: [{ name: 'a', type: 'password' }] } },
      { kind: 'form', form: { ...RSVP.form, extra: 1 } },
    ];
    for (const s of bad) {
      const r = await api('POST', '/documents', { name: 'Malo', sections: [s] });
      expect(r.status, JSON.stringify(s)).toBe(400);
      expect((await json(r)).issues?.length, JSON.stringify(s)).toBeGreaterThan(0);
    }
  });

  it('deploys a form section as a working form; unpublished, its form is gone', async () => {
    const c = await api('POST', '/documents', {
      name: 'Boda',
      sections: [{ heading: 'Inicio', body: 'Hola' }, RSVP],
    });
    expect(c.status).toBe(200);
    const { document } = await json(c);
    const page = (await json(await api('GET', `/documents/${document.id}`))).pages[1].html as string;
    expect(page).toContain('data-nube-form="rsvp"');
    const dep = await json(await api('POST', `/documents/${document.id}/deploy`));
    const site = await json(await api('GET', `/websites/${dep.websiteId}`));
    expect(site.forms).toEqual(['rsvp']);

    const html = (await siteRequest(dep.url, t.baseUrl, '/')).text;
    expect(html).toContain('<form class="nube-form" data-nube-form="rsvp" method="post" action="/f/rsvp">');
    expect(html).toContain('name="nombre"');
    expect(html).toContain('required');
    expect(html).toContain('type="email"');
    expect(html).toContain('<textarea');
    expect(html).toContain('<option>vegetariano</option>');
    expect(html).toContain('type="checkbox"');
    expect(html).toContain('name="_gotcha"');
    expect(html).toContain('Nombre &#34;completo&#34;');
    expect(html).toContain('Confirmar &#60;ya&#62;');
    expect(html).not.toContain('<script>');

    const host = new URL(dep.url).host;
    const r = await send(t.baseUrl, {
      path: '/f/rsvp',
      host,
      body: 'nombre=Ana&correo=ana%40example.com&menu=carne&acepto=yes&_gotcha=',
      headers: { ...URLENCODED, accept: 'application/json' },
      from: `127.0.0.${n++}`,
    });
    expect(r.status, r.text).toBe(200);
    const sub = (await json(await api('GET', `/forms/${r.json().formId}/submissions`))).items[0];
    expect(sub.fields).toEqual({ nombre: 'Ana', correo: 'ana@example.com', menu: 'carne', acepto: 'yes' });

    // Byte's storage allowance (100 MB) holds the files of submissions too: past it, a 402 in words.
    const owner = await json(await api('GET', '/account'));
    await t.nube.services.files.createFromBytes(
      { scheme: 'owner', ownerId: owner.id, plan: 'byte' },
      {
        fileName: 'lleno.bin',
        contentType: 'application/octet-stream',
        access: 'private',
        region: 'LATAM',
        data: Buffer.alloc(98 * 1024 * 1024),
      },
    );
    const fd = new FormData();
    fd.set('nombre', 'Luis');
    fd.set('foto', new Blob([Buffer.alloc(3 * 1024 * 1024, 1)], { type: 'image/png' }), 'foto.png');
    const mp = await multipart(fd);
    const full = await send(t.baseUrl, {
      path: '/f/rsvp',
      host,
      body: mp.body,
      headers: { 'content-type': mp.type },
      from: `127.0.0.${n++}`,
    });
    expect(full.status).toBe(402);
    expect(full.text).toContain('storage allowance');
    expect((await json(await api('GET', `/forms/${r.json().formId}`))).submissionCount).toBe(1);

    expect((await api('POST', `/documents/${document.id}/unpublish`)).status).toBe(200);
    const gone = await send(t.baseUrl, {
      path: '/f/rsvp',
      host,
      body: 'nombre=x',
      headers: URLENCODED,
      from: `127.0.0.${n++}`,
    });
    expect(gone.status).toBe(404);
  });
});
