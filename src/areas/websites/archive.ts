import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { archiveFormat, readArchive } from '../../platform/archive-entries.js';
import { errors } from '../../platform/errors.js';
import type { Scratch, SpooledFile } from '../../platform/spool.js';
import { checkSite, SITE_LIMITS, type SiteEntry, sitePath, stripCommonFolder } from './site-files.js';

// A site arrives as a zip, a tar or a gzipped tar (told apart by their first bytes, not by a name),
// already spooled to disk. Each file is unpacked to its own file in a scratch directory, hashed on the
// way, so memory holds a few chunks whatever the archive's size. Every limit is counted on the bytes
// the archive declares and on those actually produced, so a bomb stops at the limit.

const invalid = (why: string) =>
  errors.badRequest(`not a usable site archive: ${why}`, [{ path: ['archive'], message: why }], 'InvalidArchive');
export const siteTooLarge = () =>
  errors.badRequest(
    `a site holds at most ${SITE_LIMITS.totalBytes} bytes uncompressed (${SITE_LIMITS.totalBytes / 2 ** 20} MB) and ${SITE_LIMITS.files} files`,
    undefined,
    'SiteTooLarge',
  );

/** Room for a tar's headers and padding beside the files' bytes (512 + up to 511 per entry). */
const TAR_OVERHEAD = (SITE_LIMITS.files * 2 + 2) * 1024;

export async function unpackSite(archive: SpooledFile, scratch: Scratch): Promise<SiteEntry[]> {
  const format = archiveFormat(archive.head);
  if (!format) throw invalid('send a .zip, .tar or .tar.gz');
  const files: SiteEntry[] = [];
  let declared = 0;
  await readArchive(
    archive.path,
    format,
    {
      maxBytes: SITE_LIMITS.totalBytes + TAR_OVERHEAD,
      // Folders count too, so a million empty ones cannot keep the loop busy.
      maxEntries: SITE_LIMITS.files * 2,
      tooLarge: siteTooLarge,
      damaged: invalid,
    },
    async (entry) => {
      if (entry.kind === 'directory') return;
      if (entry.kind !== 'file') {
        throw invalid(`"${entry.name.slice(0, 200)}" is a ${entry.typeName}; only regular files and folders are published`);
      }
      const path = sitePath(entry.name);
      if (path === null) return;
      declared += entry.size;
      if (files.length >= SITE_LIMITS.files || declared > SITE_LIMITS.totalBytes) throw siteTooLarge();
      const file = join(scratch.dir, String(files.length));
      const hashed = new Hashing();
      await pipeline(await entry.open(), hashed, createWriteStream(file, { flags: 'wx' }));
      files.push({ path, size: hashed.bytes, sha256: hashed.digest(), open: () => createReadStream(file) });
    },
  );
  return checkSite(stripCommonFolder(files));
}

/** Passes bytes through, counting and hashing them. */
class Hashing extends Transform {
  bytes = 0;
  private readonly hash = createHash('sha256');

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: (e?: Error | null, c?: Buffer) => void): void {
    this.bytes += chunk.length;
    this.hash.update(chunk);
    done(null, chunk);
  }

  digest(): string {
    return this.hash.digest('hex');
  }
}
