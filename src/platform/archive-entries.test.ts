import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { afterAll, describe, expect, it } from 'vitest';
import { ZipFile } from 'yazl';
import { type ArchiveEntry, archiveFormat, readArchive } from './archive-entries.js';

const dir = mkdtempSync(join(tmpdir(), 'nube-archive-entries-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const onDisk = (bytes: Buffer) => {
  const path = join(dir, String(n++));
  writeFileSync(path, bytes);
  return path;
};

class TooLarge extends Error {}
class Damaged extends Error {}
const limits = (maxBytes = 10 << 20, maxEntries = 100) => ({
  maxBytes,
  maxEntries,
  tooLarge: () => new TooLarge('too large'),
  damaged: (why: string) => new Damaged(why),
});

async function tarOf(entries: { name: string; data?: Buffer; type?: 'directory' | 'symlink' }[]): Promise<Buffer> {
  const p = pack();
  for (const e of entries) {
    if (e.type === 'directory') p.entry({ name: e.name, type: 'directory' });
    else if (e.type === 'symlink') p.entry({ name: e.name, type: 'symlink', linkname: '/etc/passwd' });
    else p.entry({ name: e.name }, e.data ?? Buffer.alloc(0));
  }
  p.finalize();
  const parts: Buffer[] = [];
  for await (const c of p) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

async function zipOf(entries: { name: string; data?: Buffer; mode?: number; dir?: boolean }[]): Promise<Buffer> {
  const z = new ZipFile();
  for (const e of entries) {
    if (e.dir) z.addEmptyDirectory(e.name);
    else z.addBuffer(e.data ?? Buffer.alloc(0), e.name, e.mode ? { mode: e.mode } : {});
  }
  z.end();
  const parts: Buffer[] = [];
  for await (const c of z.outputStream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** Every entry as [name, kind, bytes read (files)]. */
async function read(bytes: Buffer, lim = limits()) {
  const format = archiveFormat(bytes.subarray(0, 512));
  if (!format) throw new Error('no format');
  const seen: [string, ArchiveEntry['kind'], string?][] = [];
  await readArchive(onDisk(bytes), format, lim, async (e) => {
    if (e.kind !== 'file') return void seen.push([e.name, e.kind]);
    const parts: Buffer[] = [];
    for await (const c of await e.open()) parts.push(c as Buffer);
    seen.push([e.name, e.kind, Buffer.concat(parts).toString('latin1')]);
  });
  return seen;
}

describe('readArchive', () => {
  it('reads a tar and a tar.gz: files whose bytes hold zero blocks, long names (pax), folders and links told apart', async () => {
    const zeros = Buffer.alloc(4096);
    const long = `${'d'.repeat(120)}/${'f'.repeat(80)}.txt`;
    const tar = await tarOf([
      { name: 'site/', type: 'directory' },
      { name: 'site/zeros.bin', data: zeros },
      { name: long, data: Buffer.from('long name') },
      { name: 'site/link', type: 'symlink' },
      { name: 'site/last.txt', data: Buffer.from('x') },
    ]);
    const want = [
      ['site/', 'directory'],
      ['site/zeros.bin', 'file', zeros.toString('latin1')],
      [long, 'file', 'long name'],
      ['site/link', 'link'],
      ['site/last.txt', 'file', 'x'],
    ];
    expect(await read(tar)).toEqual(want);
    expect(await read(gzipSync(tar))).toEqual(want);
  });

  it('stops at the end of the archive: what follows is neither read nor inflated', async () => {
    const tar = await tarOf([{ name: 'a.txt', data: Buffer.from('a') }]);
    // A gigabyte of zeros after the archive, and garbage: a 64 kB cap would refuse either if it were inflated.
    const zeros = gzipSync(Buffer.alloc(16 << 20), { level: 9 });
    const trailing = Buffer.concat([gzipSync(tar), ...Array.from({ length: 64 }, () => zeros), gzipSync(Buffer.from('garbage'.repeat(1000)))]);
    expect(await read(trailing, limits(64 * 1024))).toEqual([['a.txt', 'file', 'a']]);
    // Nothing but zeros is an archive that ends at once.
    expect(await read(Buffer.concat(Array.from({ length: 64 }, () => zeros)), limits(64 * 1024))).toEqual([]);
  });

  it('refuses past its caps: bytes inflated, entries, a zip whose entries declare too much', async () => {
    const big = await tarOf([{ name: 'a.bin', data: Buffer.alloc(3 << 20, 1) }]);
    await expect(read(gzipSync(big), limits(1 << 20))).rejects.toBeInstanceOf(TooLarge);
    await expect(read(big, limits(1 << 20))).rejects.toBeInstanceOf(TooLarge);
    const many = await tarOf(Array.from({ length: 20 }, (_, i) => ({ name: `d${i}/`, type: 'directory' as const })));
    await expect(read(many, limits(10 << 20, 10))).rejects.toBeInstanceOf(TooLarge);
    const zip = await zipOf([
      { name: 'a.bin', data: Buffer.alloc(600 << 10, 1) },
      { name: 'b.bin', data: Buffer.alloc(600 << 10, 1) },
    ]);
    await expect(read(zip, limits(1 << 20))).rejects.toBeInstanceOf(TooLarge);
  });

  it('reads a zip: folders, files, symbolic links by their Unix mode', async () => {
    const zip = await zipOf([
      { name: 'dir/', dir: true },
      { name: 'dir/a.txt', data: Buffer.from('hola') },
      { name: 'dir/link', data: Buffer.from('/etc/passwd'), mode: 0o120777 },
    ]);
    expect(await read(zip)).toEqual([
      ['dir/', 'directory'],
      ['dir/a.txt', 'file', 'hola'],
      ['dir/link', 'link'],
    ]);
  });

  it('says a damaged archive is damaged', async () => {
    const gz = gzipSync(await tarOf([{ name: 'a.txt', data: Buffer.alloc(100_000, 7) }]));
    await expect(read(gz.subarray(0, gz.length / 2))).rejects.toBeInstanceOf(Damaged);
    const tar = await tarOf([{ name: 'a.txt', data: Buffer.from('a') }]);
    tar[148] ^= 0xff; // the checksum no longer matches
    await expect(read(tar)).rejects.toBeInstanceOf(Damaged);
    const zip = await zipOf([{ name: 'a.txt', data: Buffer.from('a') }]);
    await expect(read(zip.subarray(0, zip.length - 10))).rejects.toBeInstanceOf(Damaged);
  });
});
