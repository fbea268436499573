import { gunzipSync } from 'node:zlib';
import { Readable } from 'node:stream';
import { extract as tarExtract } from 'tar-stream';
import yauzl from 'yauzl';
import { errors } from '../../platform/errors.js';
import { checkSite, SITE_LIMITS, type SiteFile, sitePath, stripCommonFolder } from './site-files.js';

// A site arrives as a zip, a tar or a gzipped tar (told apart by their first bytes, not by a name).
// Every limit is counted on the bytes actually produced while inflating, so a zip bomb stops at the
// limit instead of filling memory.

const invalid = (why: string) =>
  errors.badRequest(
    `not a usable site archive: ${why}`,
    [{ path: ['archive'], message: why }],
    'InvalidArchive',
  );
const tooLarge = () =>
  errors.badRequest(
    `a site holds at most ${SITE_LIMITS.totalBytes} bytes uncompressed`,
    undefined,
    'SiteTooLarge',
  );

class Budget {
  total = 0;
  files = 0;
  add(bytes: number): void {
    this.total += bytes;
    if (this.total > SITE_LIMITS.totalBytes) throw tooLarge();
  }
  file(): void {
    this.files += 1;
    if (this.files > SITE_LIMITS.files)
      throw errors.badRequest(`a site holds at most ${SITE_LIMITS.files} files`, undefined, 'SiteTooLarge');
  }
}

async function collect(stream: AsyncIterable<unknown>, budget: Budget): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) {
    budget.add((chunk as Buffer).length);
    parts.push(chunk as Buffer);
  }
  return Buffer.concat(parts);
}

export async function readArchive(archive: Buffer): Promise<SiteFile[]> {
  if (archive.length > SITE_LIMITS.archiveBytes)
    throw invalid(`archives up to ${SITE_LIMITS.archiveBytes} bytes`);
  let files: SiteFile[];
  if (archive.length >= 4 && archive.readUInt32LE(0) === 0x04034b50) files = await readZip(archive);
  else if (archive.length >= 2 && archive[0] === 0x1f && archive[1] === 0x8b) {
    let tar: Buffer;
    try {
      tar = gunzipSync(archive, { maxOutputLength: SITE_LIMITS.totalBytes + 10 * 1024 * 1024 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge();
      throw invalid('the gzip stream is damaged');
    }
    files = await readTar(tar);
  } else if (archive.length >= 262 && archive.toString('latin1', 257, 262) === 'ustar')
    files = await readTar(archive);
  else throw invalid('send a .zip, .tar or .tar.gz');
  return checkSite(stripCommonFolder(files));
}

async function readZip(buf: Buffer): Promise<SiteFile[]> {
  const budget = new Budget();
  let zip: yauzl.ZipFile;
  try {
    zip = await new Promise<yauzl.ZipFile>((res, rej) =>
      yauzl.fromBuffer(buf, { lazyEntries: true, validateEntrySizes: true }, (err, z) =>
        err ? rej(err) : res(z),
      ),
    );
  } catch (e) {
    throw invalid((e as Error).message);
  }
  const files: SiteFile[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      zip.on('error', reject);
      zip.on('end', () => resolve());
      zip.on('entry', (entry: yauzl.Entry) => {
        const step = async () => {
          const path = sitePath(entry.fileName);
          if (path === null) return;
          // Unix mode in the high half of the external attributes: links are refused, not followed.
          const type = (entry.externalFileAttributes >>> 16) & 0o170000;
          if (type === 0o120000) throw invalid(`"${entry.fileName}" is a symbolic link`);
          budget.file();
          if (entry.uncompressedSize > SITE_LIMITS.totalBytes) throw tooLarge();
          const stream = await new Promise<Readable>((res, rej) =>
            zip.openReadStream(entry, (err, s) => (err ? rej(err) : res(s))),
          );
          files.push({ path, data: await collect(stream, budget) });
        };
        step().then(
          () => zip.readEntry(),
          (e) => {
            zip.close();
            reject(e);
          },
        );
      });
      zip.readEntry();
    });
  } catch (e) {
    if ((e as { status?: number }).status) throw e;
    throw invalid((e as Error).message);
  }
  return files;
}

async function readTar(buf: Buffer): Promise<SiteFile[]> {
  const budget = new Budget();
  const files: SiteFile[] = [];
  const ex = tarExtract();
  const done = (async () => {
    for await (const entry of ex) {
      const { name, type } = entry.header;
      if (type === 'directory') {
        entry.resume();
        continue;
      }
      if (type !== 'file' && type !== 'contiguous-file') {
        entry.resume();
        throw invalid(`"${name}" is a ${type}; only regular files and folders are published`);
      }
      const path = sitePath(name);
      if (path === null) {
        entry.resume();
        continue;
      }
      budget.file();
      files.push({ path, data: await collect(entry, budget) });
    }
  })();
  Readable.from([buf]).pipe(ex);
  try {
    await done;
  } catch (e) {
    ex.destroy();
    if ((e as { status?: number }).status) throw e;
    throw invalid((e as Error).message);
  }
  return files;
}
