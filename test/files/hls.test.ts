// HLS for videos (issue 34 item 5) on both metadata stores and both blob backends: a test video made
// with ffmpeg's testsrc, uploaded with `hls: true` (or asked for later), turned into 360p and 720p
// renditions by a durable job, and played back by ffprobe from the playlist URL; segments served with
// Range; a private file's signed link refused once forged; a file that is not a video fails in words;
// Byte is 402; another owner's file is a 404; storage counts the renditions and a purge frees them.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json } from '../helpers/server.js';
import { type FilesNube, SETUPS, setupName, startFilesNube } from './helpers.js';

function testVideo(name: string, seconds: number, size = '1280x720'): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'nube-hls-'));
  const path = join(dir, name);
  try {
    execFileSync('ffmpeg', [
      '-v',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      `testsrc=size=${size}:rate=24`,
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=440',
      '-t',
      String(seconds),
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-c:a',
      'aac',
      '-shortest',
      path,
    ]);
    return readFileSync(path);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.each(SETUPS)('files: HLS ($dialect + $backend)', (setup) => {
  let t: FilesNube;
  let video: Buffer;

  beforeAll(async () => {
    t = await startFilesNube(setup);
    video = testVideo(`v-${setup.dialect}-${setup.backend}.mp4`, 6);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
  });

  const put = async (
    name: string,
    bytes: Buffer,
    contentType: string,
    extra: Record<string, unknown> = {},
    key?: string,
  ) => {
    const created = await t.api('/files', {
      method: 'POST',
      key,
      body: JSON.stringify({ fileName: name, contentType, size: bytes.byteLength, ...extra }),
    });
    const body = await json(created);
    if (created.status !== 201) return { status: created.status, body };
    expect(
      (await fetch(body.putUrl, { method: 'PUT', body: bytes, headers: { 'content-type': contentType } }))
        .status,
    ).toBe(200);
    return { status: 201, body };
  };
  const settled = async (fileId: string) => {
    for (let i = 0; i < 1200; i++) {
      const h = await json(await t.api(`/files/${fileId}/hls`));
      if (h.status === 'ready' || h.status === 'failed') return h;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('HLS did not settle in 120 s');
  };

  it(`makes 360p and 720p renditions a player reads from the playlist URL (${setupName(setup)})`, async () => {
    const up = await put('clip.mp4', video, 'video/mp4', { hls: true });
    expect(up.status).toBe(201);
    const h = await settled(up.body.file.id);
    expect(h, JSON.stringify(h)).toMatchObject({
      status: 'ready',
      progress: 1,
      error: null,
      playlistUrl: expect.stringContaining('/hls/'),
    });
    expect(h.renditions.map((r: { height: number }) => r.height)).toEqual([360, 720]);
    expect(h.bytes).toBeGreaterThan(0);
    // A player (ffprobe) reads the master playlist, picks a rendition and decodes it: H.264 and AAC.
    // (asynchronously: this process serves the playlist it reads)
    const probed = JSON.parse(
      (
        await promisify(execFile)(
          'ffprobe',
          ['-v', 'error', '-show_streams', '-show_format', '-of', 'json', h.playlistUrl],
          { encoding: 'utf8' },
        )
      ).stdout,
    );
    const codecs = probed.streams.map((s: { codec_name: string }) => s.codec_name);
    expect(codecs).toEqual(expect.arrayContaining(['h264', 'aac']));
    expect(Number(probed.format.duration)).toBeGreaterThan(5);
    // Playlists and segments: types, caching, Range.
    const master = await fetch(h.playlistUrl);
    expect(master.headers.get('content-type')).toBe('application/vnd.apple.mpegurl');
    expect(master.headers.get('cache-control')).toBe('private, max-age=3600');
    const text = await master.text();
    expect(text).toContain('#EXT-X-STREAM-INF');
    const base = h.playlistUrl.replace(/master\.m3u8$/, '');
    const media = await (await fetch(`${base}v1/index.m3u8`)).text();
    expect(media).toMatch(/#EXT-X-TARGETDURATION:[4-6]/);
    const seg = media.split('\n').find((l) => l.endsWith('.ts'))!;
    const part = await fetch(`${base}v1/${seg}`, { headers: { range: 'bytes=0-187' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-type')).toBe('video/mp2t');
    expect(Buffer.from(await part.arrayBuffer())[0]).toBe(0x47);
    // A forged or mangled link, and paths outside the renditions, open nothing.
    const token = h.playlistUrl.split('/hls/')[1].split('/')[0];
    const forged = token.replace(/.$/, (c: string) => (c === '0' ? '1' : '0'));
    expect((await fetch(h.playlistUrl.replace(token, forged))).status).toBe(403);
    expect((await fetch(`${base}../../blob/x`)).ok).toBe(false);
    expect((await fetch(`${base}v1/../../etc`)).status).toBe(404);
    // Asking again answers its state; the renditions count in the owner's storage.
    expect((await json(await t.api(`/files/${up.body.file.id}/hls`, { method: 'POST' }))).status).toBe(
      'ready',
    );
    const stored = await t.nube.services.files.repo.storedBytes(t.ownerId);
    expect(stored).toBeGreaterThanOrEqual(video.byteLength + h.bytes);
    // Deleted for good (trash purged), its renditions go and free their bytes.
    await t.nube.services.files.hls!.purge(up.body.file.id);
    expect(await t.nube.services.files.repo.storedBytes(t.ownerId)).toBe(stored - h.bytes);
    expect((await fetch(h.playlistUrl)).status).toBe(404);
  }, 180_000);

  it('a public file streams at a stable URL; a file that is not a video fails in words', async () => {
    const small = testVideo(`s-${setup.dialect}-${setup.backend}.mp4`, 2, '320x240');
    const pub = await put('pub.mp4', small, 'video/mp4', { access: 'public' });
    const started = await json(await t.api(`/files/${pub.body.file.id}/hls`, { method: 'POST' }));
    expect(['processing', 'ready']).toContain(started.status);
    const h = await settled(pub.body.file.id);
    expect(h.status).toBe('ready');
    // Below 360 lines: one rendition at the source's own height.
    expect(h.renditions).toEqual([expect.objectContaining({ height: 240, width: 320 })]);
    expect(h.playlistUrl).toBe(`${t.baseUrl}/public/hls/${pub.body.file.id}/master.m3u8`);
    const r = await fetch(h.playlistUrl);
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('public, max-age=3600');

    const text = await put('notes.txt', Buffer.from('no soy un video\n'), 'video/mp4');
    await t.api(`/files/${text.body.file.id}/hls`, { method: 'POST' });
    const failed = await settled(text.body.file.id);
    expect(failed).toMatchObject({ status: 'failed', playlistUrl: null });
    expect(failed.error).toMatch(/not a video|no video stream/);
  }, 120_000);

  it("refuses Byte (402), another owner's file (404) and a file in the trash (409)", async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' });
    const refused = await put('b.mp4', Buffer.from('x'), 'video/mp4', { hls: true }, byte.secret);
    expect(refused.status).toBe(402);
    expect(refused.body.code).toBe('PlanUpgradeRequired');
    const mine = await put('m.mp4', Buffer.from('x'), 'video/mp4');
    const other = await t.nube.services.account.createAccount({ name: 'tera', plan: 'tera' });
    expect(
      (await t.api(`/files/${mine.body.file.id}/hls`, { method: 'POST', key: other.secret })).status,
    ).toBe(404);
    expect((await t.api(`/files/${mine.body.file.id}/hls`, { key: other.secret })).status).toBe(404);
    await t.api(`/files/${mine.body.file.id}`, { method: 'DELETE' });
    expect((await t.api(`/files/${mine.body.file.id}/hls`, { method: 'POST' })).status).toBe(409);
  });
});
