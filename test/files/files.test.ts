import { createHash, randomBytes } from 'node:crypto';
import { ALL_MIGRATIONS } from '../../src/migrations.js';
import { migrateToLatest } from '../../src/store/migrate.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json } from '../helpers/server.js';
import { trashAndRestoreBody } from './bodies.js';
import { type FilesNube, SETUPS, setupName, startFilesNube, upload } from './helpers.js';

describe.each(SETUPS)('files over HTTP ($dialect + $backend)', (setup) => {
  let t: FilesNube;
  beforeAll(async () => {
    t = await startFilesNube(setup);
  });
  afterAll(async () => {
    await t?.close();
  });

  const blobHead = (access: string, id: string, region = 'LATAM') =>
    t.nube.services.files.stores.at(region).head(`${access}/${t.ownerId}/${id}`);

  it(`uploads through putUrl, then the file is listed DONE and readable (${setupName(setup)})`, async () => {
    const data = Buffer.from('hello nube files\n');
    const created = await t.api('/files', {
      method: 'POST',
      body: JSON.stringify({ fileName: 'hello.txt', contentType: 'text/plain', size: data.byteLength, assetId: 'a1', region: 'EU' }),
    });
    expect(created.status).toBe(201);
    const { file, putUrl } = await json(created);
    expect(file).toMatchObject({ name: 'hello.txt', access: 'private', region: 'EU', assetId: 'a1', url: null, status: 'PENDING' });
    // Not listed (nor readable) before the bytes arrive.
    expect((await json(await t.api('/files?assetId=a1'))).items).toEqual([]);
    expect((await t.api(`/files/${file.id}`)).status).toBe(404);
    expect(t.events.some((e) => e.event === 'file.created' && (e.data as { id: string }).id === file.id)).toBe(false);

    const put = await fetch(putUrl, { method: 'PUT', body: data, headers: { 'content-type': 'text/plain' } });
    expect(put.status).toBe(200);
    const listed = await json(await t.api('/files?assetId=a1'));
    expect(listed.items.map((f: { id: string; status: string }) => [f.id, f.status])).toEqual([[file.id, 'DONE']]);
    const ev = t.events.find((e) => e.event === 'file.created' && (e.data as { id: string }).id === file.id);
    expect(ev?.ownerId).toBe(t.ownerId);
    expect(ev?.data).toMatchObject({ id: file.id, status: 'DONE', size: data.byteLength });

    const got = await json(await t.api(`/files/${file.id}`));
    expect(got.readUrl).toMatch(/\/blob\//);
    const read = await fetch(got.readUrl);
    expect(read.status).toBe(200);
    expect(read.headers.get('content-type')).toBe('text/plain');
    expect(Buffer.from(await read.arrayBuffer()).equals(data)).toBe(true);
    expect(await blobHead('private', file.id, 'EU')).not.toBeNull();
    // Regions are separate locations: nothing landed in the default one.
    expect(await blobHead('private', file.id, 'LATAM')).toBeNull();
  });

  it('refuses a body whose length differs from size, stores nothing, and a putUrl works once', async () => {
    const created = await json(
      await t.api('/files', { method: 'POST', body: JSON.stringify({ fileName: 'x.bin', contentType: 'application/octet-stream', size: 10 }) }),
    );
    const short = await fetch(created.putUrl, { method: 'PUT', body: Buffer.alloc(9) });
    expect(short.status).toBe(400);
    const long = await fetch(created.putUrl, { method: 'PUT', body: Buffer.alloc(11) });
    expect([400, 413]).toContain(long.status);
    expect(await blobHead('private', created.file.id)).toBeNull();
    expect((await t.api(`/files/${created.file.id}`)).status).toBe(404);
    // A refused attempt frees the URL; the first successful upload uses it up.
    expect((await fetch(created.putUrl, { method: 'PUT', body: Buffer.alloc(10, 1) })).status).toBe(200);
    const again = await fetch(created.putUrl, { method: 'PUT', body: Buffer.alloc(10, 2) });
    expect(again.status).toBe(403);
    expect((await json(again)).code).toBe('UploadUrlUsed');
    const read = await fetch((await json(await t.api(`/files/${created.file.id}`))).readUrl);
    expect(Buffer.from(await read.arrayBuffer()).equals(Buffer.alloc(10, 1))).toBe(true);
  });

  it('refuses a tampered or expired readUrl with 403', async () => {
    const f = await upload(t, 'r.txt', Buffer.from('read me'));
    const { readUrl } = await json(await t.api(`/files/${f.id}`));
    const dot = readUrl.lastIndexOf('.');
    const mac = readUrl.slice(dot + 1);
    const tampered = `${readUrl.slice(0, dot)}.${mac.slice(0, -2)}${mac.endsWith('AA') ? 'BB' : 'AA'}`;
    expect((await fetch(readUrl.replace('/blob/ey', '/blob/ez'))).status).toBe(403);
    expect((await fetch(tampered)).status).toBe(403);
    const files = t.nube.services.files;
    files.setClock(() => Date.now() + 3601_000);
    try {
      const expired = await fetch(readUrl);
      expect(expired.status).toBe(403);
      expect((await json(expired)).code).toBe('Expired');
    } finally {
      files.setClock(Date.now);
    }
    expect((await fetch(readUrl)).status).toBe(200);
  });

  it('serves Range (206), ETag (304) and HEAD with the stored type', async () => {
    const data = randomBytes(100_000);
    const f = await upload(t, 'data.bin', data, { contentType: 'application/x-test' });
    const { readUrl } = await json(await t.api(`/files/${f.id}`));
    const part = await fetch(readUrl, { headers: { range: 'bytes=10-19' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 10-19/${data.byteLength}`);
    expect(Buffer.from(await part.arrayBuffer()).equals(data.subarray(10, 20))).toBe(true);
    const full = await fetch(readUrl);
    const etag = full.headers.get('etag') as string;
    expect(full.headers.get('content-type')).toBe('application/x-test');
    expect(createHash('sha256').update(Buffer.from(await full.arrayBuffer())).digest('hex')).toBe(
      createHash('sha256').update(data).digest('hex'),
    );
    expect((await fetch(readUrl, { headers: { 'if-none-match': etag } })).status).toBe(304);
    const head = await fetch(readUrl, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(data.byteLength));
  });

  it('paginates newest first with a stable cursor while files are inserted; a bad cursor is 400', async () => {
    const assetId = `page-${randomBytes(4).toString('hex')}`;
    const before: string[] = [];
    for (let i = 0; i < 12; i++) before.push((await upload(t, `p${i}.txt`, Buffer.from(`p${i}`), { assetId })).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let inserted = 0;
    do {
      const qs: string = `/files?assetId=${assetId}&limit=5${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const [page] = await Promise.all([
        t.api(qs).then(json),
        // Concurrent inserts between pages land before the first page, never inside the walk.
        upload(t, `late${inserted++}.txt`, Buffer.from('late'), { assetId }),
      ]);
      seen.push(...page.items.map((f: { id: string }) => f.id));
      cursor = page.nextCursor;
      expect(page.hasMore).toBe(cursor !== null);
    } while (cursor);
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of before) expect(seen).toContain(id);
    const walk = seen.filter((id) => before.includes(id));
    expect(walk).toEqual([...before].reverse());

    for (const bad of ['nope', Buffer.from('{"v":1,"id":"x"}').toString('base64url')]) {
      const r = await t.api(`/files?cursor=${bad}`);
      expect(r.status).toBe(400);
      expect((await json(r)).code).toBe('InvalidCursor');
    }
  });

  it('moves the object between public and private and only a public file has a URL', async () => {
    const data = Buffer.from('public bytes');
    const f = await upload(t, 'pub.txt', data, { access: 'public' });
    expect(f.url).toMatch(new RegExp(`/public/files/${f.id}/pub\\.txt$`));
    const pub = await fetch(f.url);
    expect(pub.status).toBe(200);
    expect(await pub.text()).toBe('public bytes');
    expect(await blobHead('public', f.id)).not.toBeNull();

    const toPrivate = await t.api(`/files/${f.id}`, { method: 'PATCH', body: JSON.stringify({ access: 'private' }) });
    expect(toPrivate.status).toBe(200);
    expect((await json(toPrivate)).url).toBeNull();
    expect((await fetch(f.url)).status).toBe(404);
    expect(await blobHead('public', f.id)).toBeNull();
    expect(await blobHead('private', f.id)).not.toBeNull();
    const updated = t.events.filter((e) => e.event === 'file.updated' && (e.data as { id: string }).id === f.id);
    expect(updated).toHaveLength(1);
    const { readUrl } = await json(await t.api(`/files/${f.id}`));
    expect(await (await fetch(readUrl)).text()).toBe('public bytes');

    const back = await json(await t.api(`/files/${f.id}`, { method: 'PATCH', body: JSON.stringify({ access: 'public', name: 'renamed.txt', metadata: { k: 1 } }) }));
    expect(back).toMatchObject({ access: 'public', name: 'renamed.txt', metadata: { k: 1 } });
    // The old URL keeps working after a rename: the id decides, the name is cosmetic.
    expect((await fetch(f.url)).status).toBe(200);
    expect((await fetch(back.url)).status).toBe(200);
    // The read URL minted while private points at the old key: gone with it.
    expect((await fetch(readUrl)).status).toBe(404);
  });

  it('soft-deletes, restores, and purges after the retention', async () => {
    const f = await upload(t, 'trash.txt', Buffer.from('trash'));
    await trashAndRestoreBody(t, f.id);
    expect(t.events.some((e) => e.event === 'file.deleted' && (e.data as { id: string }).id === f.id)).toBe(true);
    expect(t.events.some((e) => e.event === 'file.restored' && (e.data as { id: string }).id === f.id)).toBe(true);
    // Restore cancelled the purge job.
    const { jobs } = t.nube.deps;
    const db = t.nube.deps.store.db;
    const pending = await db.selectFrom('jobs').select('id').where('key', '=', `files.purge:${f.id}`).execute();
    expect(pending).toHaveLength(0);

    // Delete again, move the clock past 7 days: restore is refused, and the due purge removes all.
    await t.api(`/files/${f.id}`, { method: 'DELETE' });
    const files = t.nube.services.files;
    files.setClock(() => Date.now() + 8 * 86_400_000);
    try {
      const late = await t.api(`/files/${f.id}/restore`, { method: 'POST' });
      expect(late.status).toBe(409);
      expect((await json(late)).code).toBe('RetentionExpired');
      expect((await json(await t.api('/files?status=DELETED'))).items.find((x: { id: string }) => x.id === f.id).daysUntilPurge).toBe(0);
      await jobs.enqueue('files.purge', { fileId: f.id }, { key: `files.purge:${f.id}`, onDuplicate: 'replace', runAt: Date.now() - 1 });
      await jobs.runDue();
      // The server's own poller may have claimed the due job first: wait, with the clock still moved,
      // for whichever worker runs it.
      for (let i = 0; i < 400 && (await t.api(`/files/${f.id}`)).status !== 404; i++) await new Promise((r) => setTimeout(r, 50));
    } finally {
      files.setClock(Date.now);
    }
    expect((await t.api(`/files/${f.id}`)).status).toBe(404);
    expect(await blobHead('private', f.id)).toBeNull();
  });

  it('keeps the stored total equal to what the files hold: uploads, copies, trash, restore, purge', async () => {
    const owner = await t.nube.services.account.createAccount({ name: 'usage', plan: 'tera' });
    const id = owner.account.id;
    const repo = t.nube.services.files.repo;
    const db = t.nube.deps.store.db;
    const summed = async () =>
      Number(
        (
          await db
            .selectFrom('files')
            .select((eb) => eb.fn.sum<string | number | null>('size').as('s'))
            .where('owner_id', '=', id)
            .where('status', 'in', ['DONE', 'DELETED'])
            .executeTakeFirst()
        )?.s ?? 0,
      );
    const check = async (bytes: number) => {
      expect(await repo.storedBytes(id)).toBe(bytes);
      expect(await summed()).toBe(bytes);
    };
    await check(0);
    const a = await upload(t, 'a.txt', Buffer.alloc(5, 1), {}, owner.secret);
    const b = await upload(t, 'b.txt', Buffer.alloc(7, 1), {}, owner.secret);
    // A file waiting for its bytes holds none yet.
    await t.api('/files', { method: 'POST', key: owner.secret, body: JSON.stringify({ fileName: 'p.txt', contentType: 'text/plain', size: 100 }) });
    await check(12);
    await t.api(`/files/${a.id}/duplicate`, { method: 'POST', key: owner.secret });
    await check(17);
    // The trash counts until it is purged; a restore changes nothing.
    await t.api(`/files/${b.id}`, { method: 'DELETE', key: owner.secret });
    await check(17);
    await t.api(`/files/${b.id}/restore`, { method: 'POST', key: owner.secret });
    await check(17);
    await t.api(`/files/${b.id}`, { method: 'DELETE', key: owner.secret });
    expect(await repo.remove(b.id, 'DELETED')).toBe(true);
    expect(await repo.remove(b.id, 'DELETED')).toBe(false);
    await check(10);
    // A store from before the totals were kept gets them from its files when it migrates.
    await db.schema.dropTable('files_usage').execute();
    await db.deleteFrom('nube_migrations' as never).where('name' as never, '=', '0170-files-usage' as never).execute();
    await migrateToLatest(db, ALL_MIGRATIONS);
    await check(10);
  });

  it('does not purge a file before its retention even if the job runs early', async () => {
    const f = await upload(t, 'early.txt', Buffer.from('early'));
    await t.api(`/files/${f.id}`, { method: 'DELETE' });
    const { jobs } = t.nube.deps;
    const jobId = await jobs.enqueue('files.purge', { fileId: f.id }, { key: `files.purge:${f.id}`, onDuplicate: 'replace', runAt: Date.now() - 1 });
    await jobs.runDue();
    // Whichever worker claimed it (this call or the server's poller), the purge job must have run.
    for (let i = 0; i < 400 && (await jobs.get(jobId))?.status !== 'done'; i++) await new Promise((r) => setTimeout(r, 50));
    expect((await jobs.get(jobId))?.status).toBe('done');
    expect((await json(await t.api(`/files/${f.id}`))).status).toBe('DELETED');
    expect(await blobHead('private', f.id)).not.toBeNull();
  });

  it('duplicates object and record', async () => {
    const f = await upload(t, 'orig.txt', Buffer.from('original'), { metadata: { a: 'b' } });
    const dup = await t.api(`/files/${f.id}/duplicate`, { method: 'POST' });
    expect(dup.status).toBe(200);
    const copy = await json(dup);
    expect(copy).toMatchObject({ name: 'orig.txt (copy)', metadata: { a: 'b' }, status: 'DONE', size: 8 });
    expect(copy.id).not.toBe(f.id);
    const named = await json(await t.api(`/files/${f.id}/duplicate`, { method: 'POST', body: JSON.stringify({ name: 'other.txt' }) }));
    expect(named.name).toBe('other.txt');
    const { readUrl } = await json(await t.api(`/files/${copy.id}`));
    expect(await (await fetch(readUrl)).text()).toBe('original');
    expect(t.events.some((e) => e.event === 'file.created' && (e.data as { id: string }).id === copy.id)).toBe(true);
  });

  it("answers 404 for another owner's file and keeps lists apart", async () => {
    const f = await upload(t, 'mine.txt', Buffer.from('mine'));
    const other = await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' });
    for (const [method, path] of [
      ['GET', `/files/${f.id}`],
      ['PATCH', `/files/${f.id}`],
      ['DELETE', `/files/${f.id}`],
      ['POST', `/files/${f.id}/restore`],
      ['POST', `/files/${f.id}/duplicate`],
    ] as const) {
      const r = await t.api(path, { method, key: other.secret, body: method === 'PATCH' ? JSON.stringify({ name: 'x' }) : undefined });
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    expect((await json(await t.api('/files', { key: other.secret }))).items).toEqual([]);
  });

  it('enforces the storage allowance (402) at creation and when the bytes arrive; reports the gauge', async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'small', plan: 'byte' });
    const MB = 1024 * 1024;
    const tooBig = await t.api('/files', {
      method: 'POST',
      key: byte.secret,
      body: JSON.stringify({ fileName: 'big.bin', contentType: 'application/octet-stream', size: 101 * MB }),
    });
    expect(tooBig.status).toBe(402);
    expect((await json(tooBig)).code).toBe('StorageQuotaExceeded');
    const mk = async () =>
      json(
        await t.api('/files', {
          method: 'POST',
          key: byte.secret,
          body: JSON.stringify({ fileName: 'half.bin', contentType: 'application/octet-stream', size: 60 * MB }),
        }),
      );
    const a = await mk();
    const b = await mk();
    const data = Buffer.alloc(60 * MB, 7);
    expect((await fetch(a.putUrl, { method: 'PUT', body: data })).status).toBe(200);
    const second = await fetch(b.putUrl, { method: 'PUT', body: data });
    expect(second.status).toBe(402);
    expect((await json(second)).code).toBe('StorageQuotaExceeded');
    expect(await t.nube.deps.usage.gauge('storageBytes', byte.account.id)).toBe(60 * MB);
    // Duplicating would pass the allowance too.
    expect((await t.api(`/files/${a.file.id}/duplicate`, { method: 'POST', key: byte.secret })).status).toBe(402);
  });
});
