// The entries of an archive on disk (zip, tar, gzipped tar), one at a time, as streams: nothing is
// inflated on the event loop (zlib streams run on libuv's threads) and nothing is held whole in memory.
// Inflating stops at a cap on the bytes it produces, so a gzip bomb costs at most that much work. The
// caller decides what an entry means (paths, links); the reader only tells them apart.
import { createReadStream } from 'node:fs';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { extract as tarExtract } from 'tar-stream';
import yauzl from 'yauzl';
import { ApiError } from './errors.js';
import { SizeCap } from './spool.js';

export type ArchiveFormat = 'zip' | 'tar' | 'tar.gz';

/** The format told by the first bytes (a name or a content type says nothing), or null. */
export function archiveFormat(head: Buffer): ArchiveFormat | null {
  if (head.length >= 4 && head.readUInt32LE(0) === 0x04034b50) return 'zip';
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return 'tar.gz';
  if (head.length >= 262 && head.toString('latin1', 257, 262) === 'ustar') return 'tar';
  return null;
}

export interface ArchiveEntry {
  name: string;
  /** `link` is a symbolic or hard link; `other` a device, a FIFO or anything else. */
  kind: 'file' | 'directory' | 'link' | 'other';
  /** The archive's own word for the type, for messages. */
  typeName: string;
  /** Bytes the archive says the entry holds; more or fewer fail the read. */
  size: number;
  /** The entry's bytes (files). An entry whose bytes are not read is skipped. */
  open(): Promise<Readable | AsyncIterable<Buffer>>;
}

export interface ArchiveLimits {
  /** Bytes inflated in all (a tar's headers and padding included); past it, `tooLarge()`. */
  maxBytes: number;
  /** Entries of any kind, directories included; past it, `tooLarge()`. */
  maxEntries: number;
  tooLarge(): Error;
  /** The archive cannot be read (`why` says where). */
  damaged(why: string): Error;
}

/**
 * Calls `onEntry` for each entry in order, waiting for it. The limits' own errors, ApiErrors (from
 * `onEntry`) and file-system errors pass through; anything else the archive's parsers raise, also
 * while `onEntry` reads an entry, becomes `damaged(message)`.
 */
export async function readArchive(
  path: string,
  format: ArchiveFormat,
  limits: ArchiveLimits,
  onEntry: (entry: ArchiveEntry) => Promise<void>,
): Promise<void> {
  const refusals = new WeakSet<object>();
  const counted: ArchiveLimits = {
    ...limits,
    tooLarge: () => {
      const e = limits.tooLarge();
      refusals.add(e);
      return e;
    },
  };
  try {
    if (format === 'zip') await readZip(path, counted, onEntry);
    else await readTar(path, format === 'tar.gz', counted, onEntry);
  } catch (e) {
    if (refusals.has(e as object) || e instanceof ApiError || (e as NodeJS.ErrnoException).syscall) throw e;
    throw limits.damaged((e as Error).message);
  }
}

const TAR_KINDS: Record<string, ArchiveEntry['kind']> = {
  file: 'file',
  'contiguous-file': 'file',
  directory: 'directory',
  symlink: 'link',
  link: 'link',
};

async function readTar(
  path: string,
  gzipped: boolean,
  limits: ArchiveLimits,
  onEntry: (entry: ArchiveEntry) => Promise<void>,
): Promise<void> {
  const ex = tarExtract();
  const source = createReadStream(path, { highWaterMark: 256 * 1024 });
  const end = new TarEnd();
  const feeding = gzipped
    ? pipeline(source, createGunzip({ chunkSize: 64 * 1024 }), new SizeCap(limits.maxBytes, limits.tooLarge), end, ex)
    : pipeline(source, new SizeCap(limits.maxBytes, limits.tooLarge), end, ex);
  // Its failure also ends the iteration below, which reports it.
  feeding.catch(() => {});
  let entries = 0;
  try {
    for await (const entry of ex) {
      if (++entries > limits.maxEntries) throw limits.tooLarge();
      const h = entry.header;
      let opened = false;
      await onEntry({
        name: h.name,
        kind: TAR_KINDS[h.type ?? 'file'] ?? 'other',
        typeName: h.type ?? 'file',
        size: h.size ?? 0,
        open: async () => {
          opened = true;
          // A streamx stream: iterable like a Node one.
          return entry as unknown as AsyncIterable<Buffer>;
        },
      });
      if (!opened) entry.resume();
    }
    // What follows the end of the archive is not read (nor inflated).
    if (end.ended) source.destroy();
    else await feeding;
  } catch (e) {
    ex.destroy();
    source.destroy();
    throw e;
  }
}

/**
 * Passes a tar stream through up to its end-of-archive marker (two zero blocks where a header is due)
 * and ends there, as tar itself stops reading: a stream of zeros (a gzip bomb's favourite) costs two
 * blocks instead of a header decode per 512 bytes until a cap. It follows the headers' size fields only.
 */
class TarEnd extends Transform {
  ended = false;
  /** Bytes of the current entry's data (padded to whole blocks) still to pass before the next header. */
  private data = 0;
  private header: Buffer[] = [];
  private headerBytes = 0;
  private zeroBlocks = 0;

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: (e?: Error | null, c?: Buffer) => void): void {
    if (this.ended) {
      done();
      return;
    }
    let i = 0;
    while (i < chunk.length) {
      if (this.data > 0) {
        const n = Math.min(this.data, chunk.length - i);
        this.data -= n;
        i += n;
        continue;
      }
      const part = chunk.subarray(i, i + 512 - this.headerBytes);
      this.header.push(part);
      this.headerBytes += part.length;
      i += part.length;
      if (this.headerBytes < 512) break;
      const block = this.header.length === 1 ? part : Buffer.concat(this.header);
      this.header = [];
      this.headerBytes = 0;
      if (isZeroBlock(block)) {
        if (++this.zeroBlocks === 2) {
          this.ended = true;
          this.push(chunk.subarray(0, i));
          this.push(null);
          done();
          return;
        }
        continue;
      }
      this.zeroBlocks = 0;
      this.data = Math.ceil(tarSize(block) / 512) * 512;
    }
    done(null, chunk);
  }
}

function isZeroBlock(block: Buffer): boolean {
  for (let i = 0; i < block.length; i += 8) if (block.readBigUInt64LE(i) !== 0n) return false;
  return true;
}

/** The size field of a tar header, read as tar-stream reads it (octal; base-256 past 8 GB, which any cap refuses). */
function tarSize(block: Buffer): number {
  if (block[124]! & 0x80) return Number.MAX_SAFE_INTEGER;
  let from = 124;
  while (from < 136 && block[from] === 0x20) from++;
  let to = block.indexOf(0x20, from);
  if (to < 0 || to > 136) to = 136;
  while (from < to && block[from] === 0) from++;
  const n = from === to ? 0 : Number.parseInt(block.toString('latin1', from, to), 8);
  return Number.isFinite(n) ? n : 0;
}

async function readZip(path: string, limits: ArchiveLimits, onEntry: (entry: ArchiveEntry) => Promise<void>): Promise<void> {
  const zip = await new Promise<yauzl.ZipFile>((res, rej) =>
    yauzl.open(path, { lazyEntries: true, validateEntrySizes: true, autoClose: false }, (err, z) => (err ? rej(err) : res(z))),
  );
  let entries = 0;
  let declared = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      zip.on('error', reject);
      zip.on('end', () => resolve());
      zip.on('entry', (entry: yauzl.Entry) => {
        const step = async () => {
          if (++entries > limits.maxEntries) throw limits.tooLarge();
          // yauzl checks each entry inflates to exactly its declared size, so the declared sizes bound the work.
          declared += entry.uncompressedSize;
          if (declared > limits.maxBytes) throw limits.tooLarge();
          // Unix mode in the high half of the external attributes.
          const mode = (entry.externalFileAttributes >>> 16) & 0o170000;
          const kind: ArchiveEntry['kind'] = entry.fileName.endsWith('/') || mode === 0o040000 ? 'directory' : mode === 0o120000 ? 'link' : 'file';
          await onEntry({
            name: entry.fileName,
            kind,
            typeName: kind === 'link' ? 'symbolic link' : kind,
            size: entry.uncompressedSize,
            open: () => new Promise<Readable>((res, rej) => zip.openReadStream(entry, (err, s) => (err ? rej(err) : res(s)))),
          });
        };
        step().then(() => zip.readEntry(), reject);
      });
      zip.readEntry();
    });
  } finally {
    zip.close();
  }
}
