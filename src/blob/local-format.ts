import type { FileHandle } from 'node:fs/promises';

/**
 * Each object is one file: a fixed 4 KiB header with its metadata, then the bytes. One file means one
 * atomic rename commits data and metadata together (a sidecar file could disagree after a crash), and
 * the 4 KiB offset keeps the data page-aligned. The header is written last, once the hash is known.
 */
export const HEADER_SIZE = 4096;
const MAGIC = Buffer.from('NUBEBLB1');

export interface StoredMeta {
  contentType: string;
  sha256: string;
  size: number;
}

export function encodeHeader(meta: StoredMeta): Buffer {
  const json = Buffer.from(JSON.stringify({ ct: meta.contentType, sha256: meta.sha256, size: meta.size }));
  if (json.byteLength > HEADER_SIZE - MAGIC.byteLength - 4) throw new RangeError('contentType too long');
  const header = Buffer.alloc(HEADER_SIZE);
  MAGIC.copy(header, 0);
  header.writeUInt32BE(json.byteLength, MAGIC.byteLength);
  json.copy(header, MAGIC.byteLength + 4);
  return header;
}

/** The metadata of a blob file from its first bytes (at least HEADER_SIZE of them). */
export function parseHeader(header: Buffer, path: string): StoredMeta {
  if (header.length < HEADER_SIZE || !header.subarray(0, MAGIC.byteLength).equals(MAGIC)) {
    throw new Error(`corrupt blob file (bad header): ${path}`);
  }
  const len = header.readUInt32BE(MAGIC.byteLength);
  const raw = JSON.parse(header.subarray(MAGIC.byteLength + 4, MAGIC.byteLength + 4 + len).toString('utf8')) as {
    ct: string;
    sha256: string;
    size: number;
  };
  return { contentType: raw.ct, sha256: raw.sha256, size: raw.size };
}

/** Writes every byte of `buffers` at `position`, looping over short writes. */
export async function writeAll(fh: FileHandle, buffers: Buffer[], position: number): Promise<void> {
  let pending = buffers;
  let pos = position;
  while (pending.length > 0) {
    const { bytesWritten } = await fh.writev(pending, pos);
    pos += bytesWritten;
    let skip = bytesWritten;
    const rest: Buffer[] = [];
    for (const b of pending) {
      if (skip >= b.byteLength) skip -= b.byteLength;
      else {
        rest.push(skip > 0 ? b.subarray(skip) : b);
        skip = 0;
      }
    }
    pending = rest;
  }
}
