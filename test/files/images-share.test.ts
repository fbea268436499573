import { crc32, deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json } from '../helpers/server.js';
import { type FilesNube, SETUPS, startFilesNube, upload } from './helpers.js';

async function bytesOf(t: FilesNube, id: string, key?: string): Promise<Buffer> {
  const { readUrl } = await json(await t.api(`/files/${id}`, { key }));
  return Buffer.from(await (await fetch(readUrl)).arrayBuffer());
}

describe.each(SETUPS)('images and share tokens ($dialect + $backend)', (setup) => {
  let t: FilesNube;
  let png: Buffer;
  // biome-ignore lint/suspicious/noExplicitAny: test JSON
  let original: any;
  beforeAll(async () => {
    t = await startFilesNube(setup);
    png = await sharp({ create: { width: 64, height: 48, channels: 3, background: { r: 200, g: 30, b: 30 } } })
      .png()
      .toBuffer();
    original = await upload(t, 'red.png', png, { contentType: 'image/png' });
  });
  afterAll(async () => {
    await t?.close();
  });

  const post = (path: string, body: unknown, key?: string) => t.api(path, { method: 'POST', body: JSON.stringify(body), key });

  it('optimizes to WebP and AVIF as new files, leaving the original unchanged', async () => {
    for (const [format, expected] of [
      ['webp', 'webp'],
      ['avif', 'heif'],
    ] as const) {
      const r = await post('/images/optimize', { fileId: original.id, format, quality: 60 });
      expect(r.status).toBe(200);
      const f = await json(r);
      expect(f).toMatchObject({ contentType: `image/${format}`, name: `red-optimize.${format}`, metadata: { sourceFileId: original.id } });
      const meta = await sharp(await bytesOf(t, f.id)).metadata();
      expect(meta.format).toBe(expected);
      expect([meta.width, meta.height]).toEqual([64, 48]);
      expect(t.events.some((e) => e.event === 'file.created' && (e.data as { id: string }).id === f.id)).toBe(true);
    }
    expect((await bytesOf(t, original.id)).equals(png)).toBe(true);
  });

  it('resizes, rotates, crops and grays', async () => {
    const resized = await json(await post('/images/resize', { fileId: original.id, width: 32 }));
    expect(await sharp(await bytesOf(t, resized.id)).metadata()).toMatchObject({ format: 'png', width: 32, height: 24 });
    const rotated = await json(await post('/images/rotate', { fileId: original.id, degrees: 90, name: 'turned.png' }));
    expect(rotated.name).toBe('turned.png');
    expect(await sharp(await bytesOf(t, rotated.id)).metadata()).toMatchObject({ width: 48, height: 64 });
    const cropped = await json(await post('/images/crop', { fileId: original.id, left: 4, top: 4, width: 10, height: 20 }));
    expect(await sharp(await bytesOf(t, cropped.id)).metadata()).toMatchObject({ width: 10, height: 20 });
    const gray = await json(await post('/images/grayscale', { fileId: original.id }));
    const { data, info } = await sharp(await bytesOf(t, gray.id)).raw().toBuffer({ resolveWithObject: true });
    // Every pixel has equal channels (or a single channel) after grayscale.
    if (info.channels >= 3) expect(data[0]).toBe(data[1]);
    const outside = await post('/images/crop', { fileId: original.id, left: 60, top: 0, width: 10, height: 10 });
    expect(outside.status).toBe(400);
    const badColor = await post('/images/rotate', { fileId: original.id, degrees: 45, background: 'not-a-color' });
    expect(badColor.status).toBe(400);
    expect((await post('/images/resize', { fileId: original.id })).status).toBe(400);
  });

  it('refuses an image of more than 100 megapixels from its header, before decoding it', async () => {
    // 15,000 x 15,000 grey pixels of zeros: 225 MB decoded from a PNG of about 220 kB.
    const side = 15_000;
    const chunk = (type: string, data: Buffer) => {
      const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
      const out = Buffer.alloc(body.length + 8);
      out.writeUInt32BE(data.length, 0);
      body.copy(out, 4);
      out.writeUInt32BE(crc32(body), body.length + 4);
      return out;
    };
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(side, 0);
    ihdr.writeUInt32BE(side, 4);
    ihdr[8] = 8; // bit depth; colour type 0 (grey), compression, filter, interlace 0
    const bomb = Buffer.concat([
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
      chunk('IHDR', ihdr),
      chunk('IDAT', deflateSync(Buffer.alloc(side * (side + 1)), { level: 9 })),
      chunk('IEND', Buffer.alloc(0)),
    ]);
    expect(bomb.length).toBeLessThan(400_000);
    const f = await upload(t, 'bomb.png', bomb, { contentType: 'image/png' });
    const r = await post('/images/rotate', { fileId: f.id, degrees: 90 });
    expect(r.status).toBe(400);
    const body = await json(r);
    expect(body, JSON.stringify(body)).toMatchObject({ code: 'ImageTooLarge', error: 'images up to 100 megapixels can be transformed; this one is 15000 x 15000' });
  });

  it('refuses a file that is not an image (400 NotAnImage) and a Byte account (402)', async () => {
    const text = await upload(t, 'notes.txt', Buffer.from('just text'));
    const r = await post('/images/optimize', { fileId: text.id });
    expect(r.status).toBe(400);
    expect((await json(r)).code).toBe('NotAnImage');
    const byte = await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' });
    const own = await upload(t, 'b.png', png, { contentType: 'image/png' }, byte.secret);
    const paid = await post('/images/grayscale', { fileId: own.id }, byte.secret);
    expect(paid.status).toBe(402);
    // The plan is checked first, whatever the id; on Mega another owner's image is a 404.
    expect((await post('/images/grayscale', { fileId: original.id }, byte.secret)).status).toBe(402);
    const mega = await t.nube.services.account.createAccount({ name: 'mega', plan: 'mega' });
    expect((await post('/images/grayscale', { fileId: original.id }, mega.secret)).status).toBe(404);
  });

  it('share tokens: create, serve without credentials, list, revoke, expire', async () => {
    const created = await post('/share-tokens', { fileId: original.id, expiresInSeconds: 120 });
    expect(created.status).toBe(201);
    const s = await json(created);
    expect(s.token).toMatch(/^shr_[A-Za-z0-9]{40}$/);
    expect(s.url).toBe(`${t.baseUrl}/share/${s.token}`);
    const got = await fetch(s.url);
    expect(got.status).toBe(200);
    expect(got.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await got.arrayBuffer()).equals(png)).toBe(true);
    expect((await fetch(s.url, { headers: { range: 'bytes=0-3' } })).status).toBe(206);

    // Stored hashed: the database never holds the token.
    const rows = await t.nube.deps.store.db.selectFrom('share_tokens').selectAll().execute();
    expect(JSON.stringify(rows)).not.toContain(s.token);

    const list = await json(await t.api('/share-tokens'));
    expect(list.items.map((x: { id: string }) => x.id)).toContain(s.id);
    expect(JSON.stringify(list)).not.toContain(s.token);

    const files = t.nube.services.files;
    files.setClock(() => Date.now() + 121_000);
    try {
      const expired = await fetch(s.url);
      expect(expired.status).toBe(403);
      expect((await json(expired)).code).toBe('ShareTokenExpired');
      expect((await json(await t.api('/share-tokens'))).items.some((x: { id: string }) => x.id === s.id)).toBe(false);
    } finally {
      files.setClock(Date.now);
    }

    expect((await t.api(`/share-tokens/${s.id}`, { method: 'DELETE' })).status).toBe(200);
    const revoked = await fetch(s.url);
    expect(revoked.status).toBe(403);
    expect((await json(revoked)).code).toBe('ShareTokenRevoked');
    expect((await fetch(`${t.baseUrl}/share/shr_${'x'.repeat(40)}`)).status).toBe(403);
    expect((await t.api(`/share-tokens/${s.id}`, { method: 'DELETE' })).status).toBe(404);
  });

  it('share tokens: only for your own DONE files and documents', async () => {
    const other = await t.nube.services.account.createAccount({ name: 'o', plan: 'tera' });
    expect((await post('/share-tokens', { fileId: original.id }, other.secret)).status).toBe(404);
    // Documents are shared like files: a document that is not yours (or does not exist) is a 404.
    const doc = await post('/share-tokens', { documentId: 'doc_1' });
    expect(doc.status).toBe(404);
    expect((await json(doc)).error).toMatch(/document/);
    expect((await post('/share-tokens', { fileId: original.id, documentId: 'd' })).status).toBe(400);
    // A link to a file that goes to the trash stops serving it.
    const f = await upload(t, 'gone.txt', Buffer.from('gone'));
    const s = await json(await post('/share-tokens', { fileId: f.id }));
    await t.api(`/files/${f.id}`, { method: 'DELETE' });
    expect((await fetch(s.url)).status).toBe(404);
  });
});
