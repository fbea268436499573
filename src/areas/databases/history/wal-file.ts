// SQLite's write-ahead log, read from its file (https://www.sqlite.org/fileformat.html, "WAL file
// format"): a 32-byte header, then frames of a 24-byte header and one page. Every frame carries the
// header's salts and a checksum that chains over all frames before it, so a reader that knows the
// checksum at an offset can tell, frame by frame, what was written whole by the current WAL (a torn or
// older frame breaks the chain). Only frames up to the last commit frame are ever shipped.
import { open } from 'node:fs/promises';

export const WAL_HEADER_BYTES = 32;
export const FRAME_HEADER_BYTES = 24;

export interface WalHeader {
  /** Checksums read as big-endian words (magic 0x377f0683) or little-endian (0x377f0682). */
  bigEndian: boolean;
  pageSize: number;
  salt1: number;
  salt2: number;
  /** The header's checksum: where the frames' chain starts. */
  cksum: [number, number];
}

export function parseWalHeader(buf: Buffer): WalHeader | null {
  if (buf.length < WAL_HEADER_BYTES) return null;
  const magic = buf.readUInt32BE(0);
  if (magic !== 0x377f0682 && magic !== 0x377f0683) return null;
  const bigEndian = magic === 0x377f0683;
  const cksum = walChecksum(bigEndian, buf.subarray(0, 24), [0, 0]);
  if (cksum[0] !== buf.readUInt32BE(24) || cksum[1] !== buf.readUInt32BE(28)) return null;
  const raw = buf.readUInt32BE(8);
  return { bigEndian, pageSize: raw === 1 ? 65536 : raw, salt1: buf.readUInt32BE(16), salt2: buf.readUInt32BE(20), cksum };
}

/** SQLite's WAL checksum over `data` (a multiple of 8 bytes), continuing from `s`. */
export function walChecksum(bigEndian: boolean, data: Buffer, s: [number, number]): [number, number] {
  let s0 = s[0];
  let s1 = s[1];
  for (let i = 0; i < data.length; i += 8) {
    const x0 = bigEndian ? data.readUInt32BE(i) : data.readUInt32LE(i);
    const x1 = bigEndian ? data.readUInt32BE(i + 4) : data.readUInt32LE(i + 4);
    s0 = (s0 + x0 + s1) >>> 0;
    s1 = (s1 + x1 + s0) >>> 0;
  }
  return [s0, s1];
}

/** What a read of the WAL found past a known position. */
export interface WalTail {
  header: WalHeader;
  /** Bytes of whole frames from `from` up to and including the last valid commit frame. */
  frames: Buffer;
  /** Offset just past the last commit frame read (= `from` when there was none). */
  end: number;
  /** The checksum chain at `end`. */
  cksum: [number, number];
  /** Database size in pages after the last commit read (0: none). */
  commitPages: number;
}

/**
 * Reads the WAL at `path` from `from` (a frame boundary whose chain value is `cksum`; WAL_HEADER_BYTES
 * and the header's checksum for the start). Null when the file is missing or its header is not a valid
 * WAL header. The caller compares `header`'s salts with the ones it read before: another salt is
 * another WAL (SQLite restarted or recreated it).
 */
export async function readWalTail(path: string, from?: { offset: number; cksum: [number, number] }): Promise<WalTail | null> {
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  try {
    const size = (await fh.stat()).size;
    const head = Buffer.alloc(WAL_HEADER_BYTES);
    const { bytesRead } = await fh.read(head, 0, WAL_HEADER_BYTES, 0);
    const header = bytesRead === WAL_HEADER_BYTES ? parseWalHeader(head) : null;
    if (!header) return null;
    const start = from?.offset ?? WAL_HEADER_BYTES;
    let cksum: [number, number] = from?.cksum ?? header.cksum;
    const frameBytes = FRAME_HEADER_BYTES + header.pageSize;
    const avail = Math.max(0, size - start);
    const buf = Buffer.alloc(avail - (avail % frameBytes));
    if (buf.length > 0) await fh.read(buf, 0, buf.length, start);
    let good = 0;
    let goodCksum = cksum;
    let commitPages = 0;
    for (let off = 0; off + frameBytes <= buf.length; off += frameBytes) {
      const fhdr = buf.subarray(off, off + FRAME_HEADER_BYTES);
      if (fhdr.readUInt32BE(8) !== header.salt1 || fhdr.readUInt32BE(12) !== header.salt2) break;
      cksum = walChecksum(header.bigEndian, fhdr.subarray(0, 8), cksum);
      cksum = walChecksum(header.bigEndian, buf.subarray(off + FRAME_HEADER_BYTES, off + frameBytes), cksum);
      if (cksum[0] !== fhdr.readUInt32BE(16) || cksum[1] !== fhdr.readUInt32BE(20)) break;
      const commit = fhdr.readUInt32BE(4);
      if (commit > 0) {
        good = off + frameBytes;
        goodCksum = cksum;
        commitPages = commit;
      }
    }
    return { header, frames: buf.subarray(0, good), end: start + good, cksum: goodCksum, commitPages };
  } finally {
    await fh.close();
  }
}

/**
 * Applies shipped frames (frame header + page, as in the WAL) to a database file open at `fh`: the
 * last version of each page, in page order; the file ends where the last commit says. Frames of one
 * transaction are always shipped whole.
 */
export async function applyFrames(
  fh: Awaited<ReturnType<typeof open>>,
  pageSize: number,
  frames: Buffer,
): Promise<number> {
  const frameBytes = FRAME_HEADER_BYTES + pageSize;
  const latest = new Map<number, number>();
  let pages = 0;
  for (let off = 0; off + frameBytes <= frames.length; off += frameBytes) {
    latest.set(frames.readUInt32BE(off), off);
    const commit = frames.readUInt32BE(off + 4);
    if (commit > 0) pages = commit;
  }
  const order = [...latest.keys()].sort((a, b) => a - b);
  // Runs of consecutive pages go in one writev.
  for (let i = 0; i < order.length; ) {
    const first = order[i] as number;
    const bufs: Buffer[] = [];
    let j = i;
    while (j < order.length && order[j] === first + (j - i) && bufs.length < 256) {
      const off = latest.get(order[j] as number) as number;
      bufs.push(frames.subarray(off + FRAME_HEADER_BYTES, off + frameBytes));
      j++;
    }
    await fh.writev(bufs, (first - 1) * pageSize);
    i = j;
  }
  if (pages > 0) await fh.truncate(pages * pageSize);
  return pages;
}
