// Forms on sites end to end: a site declares forms in its HTML, visitors post to them on the site's own
// host and on nube's (CORS for the site's origins only), urlencoded and multipart (files land in the
// owner's files), each accepted submission is listed and sent to webhooks as form.submitted; spam
// (honeypot, rate limit, size limits) and addresses nobody declared are refused. On both stores.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';
import { siteRequest, zipOf } from '../helpers/site.js';
import { FAST, verify } from '../webhooks/helpers.js';
import { type Receiver, startReceiver } from '../webhooks/receiver.js';
import { multipart, send, URLENCODED } from './helpers.js';

const PER_MINUTE = 5;

const SITE = {
  'index.html':
    '<!doctype html><html><body><h1>Hola</h1>' +
    '<form data-nube-form="contact"><input name="email"><input type="file" name="cv"><button>Send</button></form>' +
    '<form data-nube-form="keep" action="https://elsewhere.example/x" method="post"></form>' +
    '<form id="search"><input name="q"></form></body></html>',
  'news/index.html':
    "<html><body><form class='x' data-nube-form='newsletter'><input name=email></form></body></html>",
  'bad.html': '<form data-nube-form="../evil"></form><form data-nube-form=""></form>',
};

describe.each(DIALECTS)('forms on sites (%s)', (dialect) => {
  let t: TestNube;
  let receiver: Receiver;
  let secret: string;
  let site: { id: string; slug: string; url: string; forms: string[] };
  let siteHost: string;
  let n = 10;
  /** A loopback address of its own for each caller: the rate limit counts per address. */
  const addr = () => `127.0.0.${n++}`;
  const api = (method: string, path: string, body?: unknown, key?: string) =>
    caller(t)(method, path, body, key);
  const get = async (path: string, key?: string) => {
    const r = await api('GET', path, undefined, key);
    return { status: r.status, body: await json(r) };
  };
  const postSite = (form: string, body: string | Buffer, headers: Record<string, string>, from = addr()) =>
    send(t.baseUrl, { path: `/f/${form}`, host: siteHost, body, headers, from });
  /** The form.submitted delivery of one submission (deliveries of earlier tests may still be arriving). */
  const delivery = async (submissionId?: string) => {
    const find = () =>
      receiver.got.find(
        (g) => submissionId === undefined || JSON.parse(g.raw).data.submissionId === submissionId,
      );
    for (let i = 0; i < 200 && !find(); i++) await new Promise((res) => setTimeout(res, 50));
    return find();
  };
  const formOf = async (name: string) =>
    (
      (await get('/forms?limit=100')).body.items as { id: string; name: string; submissionCount: number }[]
    ).find((f) => f.name === name);

  beforeAll(async () => {
    receiver = await startReceiver();
    t = await startNube({
      dialect,
      env: { ...FAST, NUBE_OWNER_PLAN: 'mega', NUBE_FORMS_PER_MINUTE: String(PER_MINUTE) },
    });
    const hook = await json(
      await api('POST', '/webhooks', { url: receiver.url, events: ['form.submitted'] }),
    );
    secret = hook.secret;
    const r = await api('POST', '/websites', {
      slug: `forms-${dialect}`,
      archiveBase64: (await zipOf(SITE)).toString('base64'),
    });
    expect(r.status).toBe(201);
    site = await json(r);
    siteHost = new URL(site.url).host;
  });
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  it("reads the forms a site declares at deploy and gives them nube's action when served", async () => {
    expect(site.forms.sort()).toEqual(['contact', 'keep', 'newsletter']);
    const home = await siteRequest(site.url, t.baseUrl, '/');
    expect(home.status).toBe(200);
    expect(home.text).toContain(
      '<form data-nube-form="contact" action="/f/contact" method="post" enctype="multipart/form-data">',
    );
    // A form with its own action is left alone, and so is a form that is not nube's.
    expect(home.text).toContain(
      '<form data-nube-form="keep" action="https://elsewhere.example/x" method="post">',
    );
    expect(home.text).toContain('<form id="search">');
    expect(home.headers.etag).toMatch(/-f"$/);
    const etag = home.headers.etag as string;
    expect((await siteRequest(site.url, t.baseUrl, '/', { headers: { 'if-none-match': etag } })).status).toBe(
      304,
    );
    const news = await siteRequest(site.url, t.baseUrl, '/news/');
    expect(news.text).toContain(
      `<form class='x' data-nube-form='newsletter' action="/f/newsletter" method="post">`,
    );
    // Other methods than POST to /f/ and POSTs elsewhere are still not for sites.
    expect((await siteRequest(site.url, t.baseUrl, '/f/contact')).status).toBe(404);
    expect(
      (await send(t.baseUrl, { path: '/index.html', host: siteHost, body: 'a=1', headers: URLENCODED }))
        .status,
    ).toBe(405);
  });

  it('takes a urlencoded post on the site host: stored, listed, sent as form.submitted, then the thank-you page', async () => {
    const r = await postSite(
      'contact',
      'email=ana%40example.com&topic=a&topic=b&_gotcha=&constructor=c',
      URLENCODED,
    );
    expect(r.status, r.text).toBe(303);
    expect(r.headers.location).toBe(`${t.baseUrl}/f/thanks?site=${site.slug}`);
    const thanks = await fetch(r.headers.location as string);
    expect(thanks.status).toBe(200);
    const page = await thanks.text();
    expect(page).toContain('Thank you');
    expect(page).toContain(site.url);

    const got = await delivery();
    expect(verify(secret, got!.raw, got!.headers['x-service-signature'])).toBe(true);
    const evt = JSON.parse(got!.raw);
    expect(evt.event).toBe('form.submitted');
    expect(evt.data).toMatchObject({
      formName: 'contact',
      websiteId: site.id,
      siteSlug: site.slug,
      fields: { email: 'ana@example.com', topic: ['a', 'b'], constructor: 'c' },
      files: [],
      fileIds: [],
    });
    expect(evt.data.fields._gotcha).toBeUndefined();

    const form = await formOf('contact');
    expect(form).toMatchObject({
      id: evt.data.formId,
      websiteId: site.id,
      siteSlug: site.slug,
      siteUrl: site.url,
    });
    expect(form!.submissionCount).toBeGreaterThanOrEqual(1);
    const subs = await get(`/forms/${form!.id}/submissions`);
    expect(subs.status).toBe(200);
    expect(subs.body.items[0]).toMatchObject({
      id: evt.data.submissionId,
      formId: form!.id,
      fields: { email: 'ana@example.com', topic: ['a', 'b'], constructor: 'c' },
      files: [],
    });
    expect((await get(`/forms/${form!.id}`)).body.id).toBe(form!.id);
  });

  it("follows _redirect on the site's own origin only", async () => {
    const own = `${site.url}/gracias.html`;
    const r = await postSite('contact', `email=x&_redirect=${encodeURIComponent(own)}`, URLENCODED);
    expect(r.status).toBe(303);
    expect(r.headers.location).toBe(own);
    const away = await postSite(
      'contact',
      `email=x&_redirect=${encodeURIComponent('https://evil.example/')}`,
      URLENCODED,
    );
    expect(away.status).toBe(303);
    expect(away.headers.location).toBe(`${t.baseUrl}/f/thanks?site=${site.slug}`);
    const subs = await get(`/forms/${(await formOf('contact'))!.id}/submissions?limit=1`);
    expect(subs.body.items[0].fields).toEqual({ email: 'x' });
  });

  it("takes multipart with a file: the file is the owner's, the answer JSON when asked", async () => {
    const fd = new FormData();
    fd.set('email', 'luis@example.com');
    const pdf = Buffer.from('%PDF-1.4 curriculum');
    fd.set('cv', new Blob([pdf], { type: 'application/pdf' }), 'cv.pdf');
    const { body, type } = await multipart(fd);
    const r = await postSite('contact', body, { 'content-type': type, accept: 'application/json' });
    expect(r.status, r.text).toBe(200);
    const out = r.json();
    expect(out).toMatchObject({ ok: true });
    const got = await delivery(out.submissionId);
    const evt = JSON.parse(got!.raw);
    expect(evt.data.formId).toBe(out.formId);
    expect(evt.data.fields).toEqual({ email: 'luis@example.com' });
    expect(evt.data.files).toHaveLength(1);
    const f = evt.data.files[0];
    expect(f).toMatchObject({
      field: 'cv',
      name: 'cv.pdf',
      contentType: 'application/pdf',
      size: pdf.length,
    });
    expect(evt.data.fileIds).toEqual([f.fileId]);
    const file = await get(`/files/${f.fileId}`);
    expect(file.status).toBe(200);
    expect(file.body).toMatchObject({ name: 'cv.pdf', size: pdf.length, access: 'private', status: 'DONE' });
    expect(Buffer.from(await (await fetch(file.body.readUrl)).arrayBuffer()).equals(pdf)).toBe(true);
    // An empty file input sends a nameless, empty part: no file is made of it.
    const empty = new FormData();
    empty.set('email', 'sin@archivo.mx');
    empty.set('cv', new Blob([]), '');
    const e = await multipart(empty);
    const r2 = await postSite('contact', e.body, { 'content-type': e.type, accept: 'application/json' });
    expect(r2.status, r2.text).toBe(200);
    const sub = (await get(`/forms/${out.formId}/submissions?limit=1`)).body.items[0];
    expect(sub).toMatchObject({ fields: { email: 'sin@archivo.mx' }, files: [] });
  });

  it('answers a filled honeypot as a success and stores nothing', async () => {
    const form = (await formOf('contact'))!;
    const r = await postSite('contact', 'email=bot%40spam.example&_gotcha=http%3A%2F%2Fspam', URLENCODED);
    expect(r.status).toBe(303);
    const j = await postSite('contact', 'email=bot&_gotcha=x', { ...URLENCODED, accept: 'application/json' });
    expect(j.status).toBe(200);
    expect(j.json()).toMatchObject({ ok: true });
    await new Promise((res) => setTimeout(res, 400));
    expect(receiver.got.filter((g) => String(JSON.parse(g.raw).data.fields.email).startsWith('bot'))).toEqual(
      [],
    );
    expect((await formOf('contact'))!.submissionCount).toBe(form.submissionCount);
  });

  it('limits submissions per address: 429 with Retry-After, others still get through', async () => {
    const from = addr();
    for (let i = 0; i < PER_MINUTE; i++)
      expect((await postSite('newsletter', `email=n${i}`, URLENCODED, from)).status).toBe(303);
    const over = await postSite(
      'newsletter',
      'email=over',
      { ...URLENCODED, accept: 'application/json' },
      from,
    );
    expect(over.status).toBe(429);
    expect(Number(over.headers['retry-after'])).toBeGreaterThan(0);
    expect(over.json()).toMatchObject({ code: 'RateLimited' });
    const page = await postSite('newsletter', 'email=over', URLENCODED, from);
    expect(page.status).toBe(429);
    expect(page.text).toContain('too many submissions');
    expect((await postSite('newsletter', 'email=other', URLENCODED)).status).toBe(303);
    expect((await formOf('newsletter'))!.submissionCount).toBe(PER_MINUTE + 1);
  });

  it('refuses oversize bodies, bad bodies and addresses nobody declared, in words', async () => {
    const jsonAccept = { accept: 'application/json' };
    const big = new FormData();
    big.set('cv', new Blob([Buffer.alloc(10 * 1024 * 1024 + 1, 1)]), 'big.bin');
    const mp = await multipart(big);
    const r = await postSite('contact', mp.body, { 'content-type': mp.type, ...jsonAccept });
    expect(r.status).toBe(413);
    expect(r.json().error).toMatch(/over 10 MiB/);
    const long = await postSite('contact', `email=${'a'.repeat(70 * 1024)}`, {
      ...URLENCODED,
      ...jsonAccept,
    });
    expect(long.status).toBe(413);
    const many = Array.from({ length: 101 }, (_, i) => `f${i}=1`).join('&');
    expect((await postSite('contact', many, { ...URLENCODED, ...jsonAccept })).status).toBe(413);
    expect(
      (await postSite('contact', 'email=a', { 'content-type': 'text/plain', ...jsonAccept })).status,
    ).toBe(415);
    expect(
      (await postSite('contact', '{"email":', { 'content-type': 'application/json', ...jsonAccept })).status,
    ).toBe(400);
    expect((await postSite('contact', 'email=a%00b', { ...URLENCODED, ...jsonAccept })).status).toBe(400);
    expect((await postSite('contact', 'email=a&__proto__=x', { ...URLENCODED, ...jsonAccept })).status).toBe(
      400,
    );
    expect(
      (await postSite('contact', '{"__proto__":"x"}', { 'content-type': 'application/json', ...jsonAccept }))
        .status,
    ).toBe(400);
    const claimed = await send(t.baseUrl, {
      path: '/f/contact',
      host: siteHost,
      from: addr(),
      headers: { ...URLENCODED, ...jsonAccept, 'content-length': String(30 * 1024 * 1024) },
    });
    expect(claimed.status).toBe(413);
    // Undeclared, invalid or unknown: 404, nothing made.
    const undeclared = await postSite('made-up', 'email=a', { ...URLENCODED, ...jsonAccept });
    expect(undeclared.status).toBe(404);
    expect((await postSite('..%2Fevil', 'email=a', URLENCODED)).status).toBe(404);
    const unknown = await send(t.baseUrl, {
      path: '/f/contact',
      host: siteHost.replace(site.slug, 'nobody-here'),
      body: 'a=1',
      headers: URLENCODED,
      from: addr(),
    });
    expect(unknown.status).toBe(404);
    expect(await formOf('made-up')).toBeUndefined();
  });

  it("takes posts on nube's host from the site's own origins only (CORS)", async () => {
    const path = `/f/${site.slug}/newsletter`;
    const origin = new URL(site.url).origin;
    const ok = await send(t.baseUrl, {
      path,
      body: JSON.stringify({ email: 'cors@example.com', consent: true }),
      headers: { 'content-type': 'application/json', accept: 'application/json', origin },
      from: addr(),
    });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.headers['access-control-allow-origin']).toBe(origin);
    const sub = (await get(`/forms/${ok.json().formId}/submissions?limit=1`)).body.items[0];
    expect(sub.fields).toEqual({ email: 'cors@example.com', consent: 'true' });

    const evil = await send(t.baseUrl, {
      path,
      body: 'email=x',
      headers: { ...URLENCODED, accept: 'application/json', origin: 'https://evil.example' },
      from: addr(),
    });
    expect(evil.status).toBe(403);
    expect(evil.headers['access-control-allow-origin']).toBeUndefined();
    expect(evil.json().code).toBe('ForbiddenOrigin');
    expect(
      (
        await send(t.baseUrl, {
          path,
          body: 'email=x',
          headers: { ...URLENCODED, origin: 'null' },
          from: addr(),
        })
      ).status,
    ).toBe(403);
    // Without an Origin (a server, curl): taken.
    expect((await send(t.baseUrl, { path, body: 'email=x', headers: URLENCODED, from: addr() })).status).toBe(
      303,
    );

    const pre = (o: string) =>
      send(t.baseUrl, {
        path,
        method: 'OPTIONS',
        headers: {
          origin: o,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'content-type',
        },
      });
    const allowed = await pre(origin);
    expect(allowed.status).toBe(204);
    expect(allowed.headers['access-control-allow-origin']).toBe(origin);
    expect(allowed.headers['access-control-allow-methods']).toBe('POST');
    const denied = await pre('https://evil.example');
    expect(denied.status).toBe(403);
    expect(denied.headers['access-control-allow-origin']).toBeUndefined();
    expect(
      (
        await send(t.baseUrl, {
          path: `/f/nobody-here/newsletter`,
          body: 'a=1',
          headers: URLENCODED,
          from: addr(),
        })
      ).status,
    ).toBe(404);
  });

  it('pages submissions, deletes one (its file to the trash), hides forms from other owners', async () => {
    const form = (await formOf('contact'))!;
    const all: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor ? `&cursor=${cursor}` : '';
      const p = await get(`/forms/${form.id}/submissions?limit=2${q}`);
      expect(p.status).toBe(200);
      all.push(...p.body.items.map((s: { id: string }) => s.id));
      cursor = p.body.nextCursor;
    } while (cursor);
    expect(all).toHaveLength(form.submissionCount);
    expect(new Set(all).size).toBe(all.length);
    expect((await get(`/forms/${form.id}/submissions?cursor=bogus`)).status).toBe(400);

    const other = (await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' })).secret;
    expect((await get(`/forms/${form.id}`, other)).status).toBe(404);
    expect((await get(`/forms/${form.id}/submissions`, other)).status).toBe(404);
    expect((await get('/forms', other)).body.items).toEqual([]);
    expect((await api('DELETE', `/forms/${form.id}`, undefined, other)).status).toBe(404);
    expect((await api('DELETE', `/forms/${form.id}/submissions/${all[0]}`, undefined, other)).status).toBe(
      404,
    );

    const withFile = (await get(`/forms/${form.id}/submissions?limit=100`)).body.items.find(
      (s: { files: unknown[] }) => s.files.length > 0,
    );
    const del = await api('DELETE', `/forms/${form.id}/submissions/${withFile.id}`);
    expect(del.status).toBe(200);
    expect((await api('DELETE', `/forms/${form.id}/submissions/${withFile.id}`)).status).toBe(404);
    expect((await get(`/files/${withFile.files[0].fileId}`)).body.status).toBe('DELETED');
    expect((await get(`/forms/${form.id}`)).body.submissionCount).toBe(form.submissionCount - 1);

    expect((await api('DELETE', `/forms/${form.id}`)).status).toBe(200);
    expect((await get(`/forms/${form.id}`)).status).toBe(404);
    expect((await get(`/forms/${form.id}/submissions`)).status).toBe(404);
    // The page still declares it: the next submission starts a new record.
    expect((await postSite('contact', 'email=again', URLENCODED)).status).toBe(303);
    const again = (await formOf('contact'))!;
    expect(again.id).not.toBe(form.id);
    expect(again.submissionCount).toBe(1);
  });

  it('stops taking submissions once the site is gone or no longer declares the form', async () => {
    const r = await api('POST', `/websites/${site.id}/deploy`, {
      archiveBase64: (await zipOf({ 'index.html': '<form data-nube-form="contact"></form>' })).toString(
        'base64',
      ),
    });
    expect(r.status).toBe(200);
    expect((await json(r)).forms).toEqual(['contact']);
    // The site's live state is cached for a second per replica; this replica forgot it at once.
    expect((await postSite('newsletter', 'email=a', URLENCODED)).status).toBe(404);
    expect((await postSite('contact', 'email=a', URLENCODED)).status).toBe(303);
    expect((await api('DELETE', `/websites/${site.id}`)).status).toBe(200);
    expect((await postSite('contact', 'email=a', URLENCODED)).status).toBe(404);
    expect(
      (
        await send(t.baseUrl, {
          path: `/f/${site.slug}/contact`,
          body: 'a=1',
          headers: URLENCODED,
          from: addr(),
        })
      ).status,
    ).toBe(404);
    // The form and its submissions are the owner's still.
    expect((await formOf('contact'))!.submissionCount).toBe(2);
  });
});
