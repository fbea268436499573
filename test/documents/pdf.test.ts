import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { isPaper, pdfInfo, pdfPngs, pdfText } from '../helpers/pdf.js';
import { json } from '../helpers/server.js';
import { type DocsNube, hasRed, redPng, startDocsNube } from './helpers.js';

// The PDF export looked at as rendered: poppler reads page count, page size and text back, pdftoppm
// turns pages into PNGs for the images.

const SPANISH = [
  {
    id: 'uno',
    heading: '¿Dónde está el niño?',
    body: '¡Qué año! El señor Muñoz comió **piñones** en Logroño.',
  },
  { id: 'dos', heading: 'Segunda página', body: 'Cigüeña, acción, útil, ÁÉÍÓÚ Ñ ü.' },
  { id: 'tres', heading: 'Tercera página', body: 'Fin del documento.' },
];

describe.each(DIALECTS)('documents PDF (%s)', (dialect) => {
  let t: DocsNube;
  let internal: Server;
  let internalUrl: string;
  let hits: string[];
  const pdfOf = async (id: string, query = '', key?: string) => {
    const r = await t.api('GET', `/documents/${id}/pdf${query}`, undefined, key);
    return { r, pdf: Buffer.from(await r.arrayBuffer()) };
  };
  const create = async (body: unknown) => (await json(await t.api('POST', '/documents', body))).document;

  beforeAll(async () => {
    t = await startDocsNube(dialect);
    hits = [];
    internal = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end('internal secret');
    });
    await new Promise<void>((r) => internal.listen(0, '127.0.0.1', r));
    internalUrl = `http://127.0.0.1:${(internal.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await t?.close();
    internal?.close();
  });

  it('exports every section as a page, A4 by default, Spanish text intact, as an attachment', async () => {
    const doc = await create({ name: 'Informe Año Niño', sections: SPANISH });
    const { r, pdf } = await pdfOf(doc.id);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('application/pdf');
    expect(r.headers.get('content-disposition')).toBe(
      `attachment; filename="Informe Ano Nino.pdf"; filename*=UTF-8''${encodeURIComponent('Informe Año Niño.pdf')}`,
    );
    const info = await pdfInfo(pdf);
    expect(info.pages).toBe(3);
    expect(isPaper(info, 'A4'), JSON.stringify(info)).toBe(true);
    const text = await pdfText(pdf);
    expect(text[0]).toContain('¿Dónde está el niño?');
    expect(text[0]).toContain('¡Qué año! El señor Muñoz comió piñones en Logroño.');
    expect(text[1]).toContain('Cigüeña, acción, útil, ÁÉÍÓÚ Ñ ü.');
    expect(text[2]).toContain('Fin del documento.');
    expect(await pdfPngs(pdf, 20)).toHaveLength(3);

    const inline = await pdfOf(doc.id, '?inline=1');
    expect(inline.r.headers.get('content-disposition')).toMatch(/^inline; filename="Informe Ano Nino.pdf"/);
    expect((await pdfOf(doc.id, '?inline=0')).r.status).toBe(400);
  });

  it('honours metadata.format and the sections filter', async () => {
    const doc = await create({ name: 'Carta', metadata: { format: 'Letter' }, sections: SPANISH });
    const letter = await pdfOf(doc.id, '?sections=uno,tres');
    const letterInfo = await pdfInfo(letter.pdf);
    expect(letterInfo.pages).toBe(2);
    expect(isPaper(letterInfo, 'Letter'), JSON.stringify(letterInfo)).toBe(true);
    const text = (await pdfText(letter.pdf)).join('\n');
    expect(text).toContain('¿Dónde está el niño?');
    expect(text).toContain('Fin del documento.');
    expect(text).not.toContain('Segunda página');
    const unknown = await pdfOf(doc.id, '?sections=uno,nada');
    expect(unknown.r.status).toBe(400);
    await t.api('PATCH', `/documents/${doc.id}`, { metadata: { format: 'A5' } });
    const a5 = await pdfInfo((await pdfOf(doc.id)).pdf);
    expect(a5.pages).toBe(3);
    expect(isPaper(a5, 'A5'), JSON.stringify(a5)).toBe(true);
    const empty = await create({ name: 'Vacío' });
    expect((await pdfOf(empty.id)).r.status).toBe(400);
  });

  it('draws images of the files area and fetches nothing outside nube', async () => {
    const image = await t.upload('rojo.png', await redPng(), 'image/png');
    const doc = await create({
      name: 'Con imagen',
      sections: [
        { heading: 'Imagen', images: [{ fileId: image, alt: 'rojo' }] },
        {
          heading: 'Intentos',
          format: 'html',
          body: `<p>texto</p><img src="${internalUrl}/img"><a href="${internalUrl}/link">enlace</a><img src="http://localhost:${new URL(internalUrl).port}/by-name">`,
          images: [{ url: `${internalUrl}/image-url` }],
        },
        { heading: 'Más', body: `![md](${internalUrl}/markdown-image) [a](${t.baseUrl}/api/v2/account)` },
      ],
    });
    const { r, pdf } = await pdfOf(doc.id);
    expect(r.status).toBe(200);
    const pages = await pdfPngs(pdf, 40);
    expect(pages).toHaveLength(3);
    expect(await hasRed(pages[0]!)).toBe(true);
    expect((await pdfText(pdf))[1]).toContain('texto');
    expect(hits).toEqual([]);
  });

  it('takes a share token in place of the credential; 403 when wrong, expired or for something else', async () => {
    const image = await t.upload('rojo.png', await redPng(), 'image/png');
    const doc = await create({
      name: 'Compartido',
      sections: [{ heading: 'Hola, ¿qué tal?', body: 'Adiós.', images: [{ fileId: image }] }],
    });
    const other = await create({ name: 'Otro', sections: [{ body: 'x' }] });
    const created = await t.api('POST', '/share-tokens', { documentId: doc.id, expiresInSeconds: 120 });
    expect(created.status).toBe(201);
    const share = await json(created);
    expect(share).toMatchObject({
      documentId: doc.id,
      fileId: null,
      url: `${t.baseUrl}/share/${share.token}`,
    });
    expect(share.pdfUrl).toBe(`${t.baseUrl}/api/v2/documents/${doc.id}/pdf?token=${share.token}&inline=1`);

    const viaToken = await fetch(share.pdfUrl);
    expect(viaToken.status).toBe(200);
    expect(viaToken.headers.get('content-disposition')).toMatch(/^inline/);
    expect((await pdfText(Buffer.from(await viaToken.arrayBuffer()))).join('')).toContain('Hola, ¿qué tal?');

    const page = await fetch(share.url);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    const html = await page.text();
    expect(html).toContain('Hola, ¿qué tal?');
    const img = await fetch(`${t.baseUrl}/share/${share.token}/assets/${image}`);
    expect([img.status, img.headers.get('content-type')]).toEqual([200, 'image/png']);
    expect(html).toContain(`/share/${share.token}/assets/${image}`);
    const notShown = await t.upload('otro.png', await redPng(), 'image/png');
    expect((await fetch(`${t.baseUrl}/share/${share.token}/assets/${notShown}`)).status).toBe(404);

    const pdfUrl = (id: string, token: string) => `${t.baseUrl}/api/v2/documents/${id}/pdf?token=${token}`;
    expect((await fetch(pdfUrl(doc.id, `shr_${'x'.repeat(40)}`))).status).toBe(403);
    expect((await fetch(pdfUrl(other.id, share.token))).status).toBe(403);
    expect((await fetch(pdfUrl(doc.id, 'nope'))).status).toBe(401);
    const fileShare = await json(await t.api('POST', '/share-tokens', { fileId: image }));
    expect((await fetch(pdfUrl(doc.id, fileShare.token))).status).toBe(403);
    // The token is for the PDF export only: the rest of the API refuses it.
    expect((await fetch(`${t.baseUrl}/api/v2/documents/${doc.id}?token=${share.token}`)).status).toBe(401);

    t.nube.services.files.setClock(() => Date.now() + 121_000);
    try {
      const expired = await fetch(pdfUrl(doc.id, share.token));
      expect(expired.status).toBe(403);
      expect((await json(expired)).code).toBe('ShareTokenExpired');
      expect((await fetch(share.url)).status).toBe(403);
    } finally {
      t.nube.services.files.setClock(Date.now);
    }
    const revocable = await json(await t.api('POST', '/share-tokens', { documentId: doc.id }));
    await t.api('DELETE', `/share-tokens/${revocable.id}`);
    expect((await fetch(pdfUrl(doc.id, revocable.token))).status).toBe(403);
    const theirs = await t.nube.services.account.createAccount({ name: 'x', plan: 'mega' });
    expect((await t.api('POST', '/share-tokens', { documentId: doc.id }, theirs.secret)).status).toBe(404);
  });
});

describe('documents PDF without a browser', () => {
  it('answers 503 when Chromium cannot start, and keeps the rest of the API working', async () => {
    const t = await startDocsNube('sqlite', { NUBE_CHROMIUM_PATH: '/nonexistent/chromium' });
    try {
      const { document } = await json(
        await t.api('POST', '/documents', { name: 'x', sections: [{ body: 'hola' }] }),
      );
      const r = await t.api('GET', `/documents/${document.id}/pdf`);
      expect(r.status).toBe(503);
      expect(await json(r)).toMatchObject({ code: 'Unavailable', retryAfter: 5 });
      expect((await t.api('POST', `/documents/${document.id}/deploy`)).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});
