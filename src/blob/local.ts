import { randomUUID } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { copyFile, type FileHandle, mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { InvalidRange, NotFound, TooLarge } from './errors.js';
import { assertValidKey, assertValidPrefix } from './keys.js';
import { encodeHeader, HEADER_SIZE, readHeader, writeAll } from './local-format.js';
import { checkPutOptions, iterateBody, Meter, toBuffer } from './meter.js';
import type {
  BlobBody,
  BlobHead,
  BlobStore,
  GetOptions,
  GetResult,
  ListEntry,
  PresignOptions,
  PutOptions,
  PutResult,
} from './types.js';
import type { UrlTokenSigner } from './url-token.js';

export interface LocalBlobStoreOptions {
  location: string;
  /** Root directory of this location; created on first write. */
  dir: string;
  signer: UrlTokenSigner;
  /** Presigned URLs are `${publicBaseUrl}/${token}`, e.g. `http://127.0.0.1:7070/blob`. */
  publicBaseUrl: string;
}

const TMP_DIR = '~tmp';
const DATA_SUFFIX = '~';
/** Batches chunks into ~1 MiB writes: far fewer syscalls than one per 64 KiB chunk, little memory. */
const WRITE_BATCH_BYTES = 1 << 20;
const WRITE_BATCH_COUNT = 256;
const READ_CHUNK = 256 * 1024;
const DEFAULT_TYPE = 'application/octet-stream';

function isErrno(err: unknown, ...codes: string[]): boolean {
  return typeof err === 'object' && err !== null && codes.includes((err as NodeJS.ErrnoException).code ?? '');
}

/** A rename is only durable once the directory entry is on disk too. */
async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export class LocalBlobStore implements BlobStore {
  readonly backend = 'local' as const;
  readonly location: string;
  readonly #root: string;
  readonly #signer: UrlTokenSigner;
  readonly #baseUrl: string;

  constructor(options: LocalBlobStoreOptions) {
    this.location = options.location;
    this.#root = options.dir;
    this.#signer = options.signer;
    this.#baseUrl = options.publicBaseUrl.replace(/\/+$/, '');
  }

  /** Data files get a `~` suffix (forbidden in keys), so key `a/b` and key `a/b/c` can coexist. */
  pathFor(key: string): string {
    assertValidKey(key);
    const segments = key.split('/');
    const last = segments.pop() as string;
    return join(this.#root, ...segments, last + DATA_SUFFIX);
  }

  async put(key: string, body: BlobBody, options: PutOptions = {}): Promise<PutResult> {
    const dest = this.pathFor(key);
    checkPutOptions(options);
    const meter = new Meter(options);
    const tmpDir = join(this.#root, TMP_DIR);
    await mkdir(tmpDir, { recursive: true });
    const tmp = join(tmpDir, randomUUID());
    const fh = await open(tmp, 'wx', 0o640);
    let closed = false;
    let committed = false;
    // One write in flight while the next batch is read and hashed, so disk and input overlap.
    let inFlight: Promise<void> = Promise.resolve();
    try {
      let pos = HEADER_SIZE;
      let batch: Buffer[] = [];
      let batched = 0;
      const flush = async () => {
        await inFlight;
        inFlight = writeAll(fh, batch, pos);
        // Keep a rejection from being reported as unhandled before the next await picks it up.
        inFlight.catch(() => {});
        pos += batched;
        batch = [];
        batched = 0;
      };
      for await (const raw of iterateBody(body)) {
        const chunk = toBuffer(raw);
        if (chunk.byteLength === 0) continue;
        meter.add(chunk);
        batch.push(chunk);
        batched += chunk.byteLength;
        if (batched >= WRITE_BATCH_BYTES || batch.length >= WRITE_BATCH_COUNT) await flush();
      }
      if (batched > 0) await flush();
      await inFlight;
      const { size, sha256 } = meter.finish();
      const contentType = options.contentType ?? DEFAULT_TYPE;
      await writeAll(fh, [encodeHeader({ contentType, sha256, size })], 0);
      await fh.sync();
      await fh.close();
      closed = true;
      await mkdir(dirname(dest), { recursive: true });
      await rename(tmp, dest);
      committed = true;
      await fsyncDir(dirname(dest));
      return { size, sha256, etag: sha256 };
    } finally {
      await inFlight.catch(() => {});
      if (!closed) await fh.close().catch(() => {});
      if (!committed) await rm(tmp, { force: true });
    }
  }

  async #openExisting(key: string): Promise<{ fh: FileHandle; path: string }> {
    const path = this.pathFor(key);
    try {
      return { fh: await open(path, 'r'), path };
    } catch (err) {
      if (isErrno(err, 'ENOENT', 'ENOTDIR')) throw new NotFound(key);
      throw err;
    }
  }

  async #describe(fh: FileHandle, path: string): Promise<BlobHead & { sha256: string }> {
    const meta = await readHeader(fh, path);
    const st = await fh.stat();
    // The etag is the content hash: identical bytes give identical tags, even across copies.
    return { size: meta.size, contentType: meta.contentType, etag: meta.sha256, lastModified: st.mtime, sha256: meta.sha256 };
  }

  async get(key: string, options: GetOptions = {}): Promise<GetResult> {
    const { fh, path } = await this.#openExisting(key);
    try {
      const { sha256: _sha, ...head } = await this.#describe(fh, path);
      let start = 0;
      let end = head.size - 1;
      if (options.range) {
        const r = options.range;
        if (!Number.isSafeInteger(r.start) || !Number.isSafeInteger(r.end) || r.start < 0 || r.end < r.start) {
          throw new InvalidRange(head.size, 'range must have integer 0 <= start <= end');
        }
        if (r.start >= head.size) throw new InvalidRange(head.size);
        start = r.start;
        end = Math.min(r.end, head.size - 1);
      }
      const contentLength = end - start + 1;
      const range = options.range ? { start, end } : undefined;
      if (contentLength <= 0) {
        await fh.close();
        return { ...head, stream: Readable.from([]), contentLength: 0, range };
      }
      const stream = fh.createReadStream({ start: HEADER_SIZE + start, end: HEADER_SIZE + end, highWaterMark: READ_CHUNK });
      return { ...head, stream, contentLength, range };
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  async head(key: string): Promise<BlobHead | null> {
    let opened: { fh: FileHandle; path: string };
    try {
      opened = await this.#openExisting(key);
    } catch (err) {
      if (err instanceof NotFound) return null;
      throw err;
    }
    try {
      const { sha256: _sha, ...head } = await this.#describe(opened.fh, opened.path);
      return head;
    } finally {
      await opened.fh.close();
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.pathFor(key);
    try {
      await unlink(path);
    } catch (err) {
      if (isErrno(err, 'ENOENT', 'ENOTDIR')) return;
      throw err;
    }
    await fsyncDir(dirname(path));
  }

  async copy(from: string, to: string): Promise<BlobHead> {
    const src = this.pathFor(from);
    const dest = this.pathFor(to);
    const tmpDir = join(this.#root, TMP_DIR);
    await mkdir(tmpDir, { recursive: true });
    const tmp = join(tmpDir, randomUUID());
    let committed = false;
    try {
      try {
        // FICLONE makes it a reflink on filesystems that can (btrfs, xfs), a plain copy elsewhere.
        await copyFile(src, tmp, fsConstants.COPYFILE_FICLONE);
      } catch (err) {
        if (isErrno(err, 'ENOENT', 'ENOTDIR')) throw new NotFound(from);
        throw err;
      }
      const fh = await open(tmp, 'r+');
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
      await mkdir(dirname(dest), { recursive: true });
      await rename(tmp, dest);
      committed = true;
      await fsyncDir(dirname(dest));
    } finally {
      if (!committed) await rm(tmp, { force: true });
    }
    const head = await this.head(to);
    if (!head) throw new NotFound(to);
    return head;
  }

  async *list(prefix: string): AsyncIterable<ListEntry> {
    assertValidPrefix(prefix);
    const slash = prefix.lastIndexOf('/');
    yield* this.#walk(slash >= 0 ? prefix.slice(0, slash) : '', prefix);
  }

  async *#walk(dirKey: string, prefix: string): AsyncIterable<ListEntry> {
    const dirPath = dirKey === '' ? this.#root : join(this.#root, ...dirKey.split('/'));
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(dirPath, { withFileTypes: true });
    } catch (err) {
      if (isErrno(err, 'ENOENT', 'ENOTDIR')) return;
      throw err;
    }
    // Sort as the keys sort (a directory `b` holds keys `b/...`), so the output is in key order.
    const items: { sortName: string; segment: string; dir: boolean }[] = [];
    for (const e of entries) {
      if (e.isDirectory() && !e.name.includes(DATA_SUFFIX)) items.push({ sortName: `${e.name}/`, segment: e.name, dir: true });
      else if (e.isFile() && e.name.endsWith(DATA_SUFFIX)) {
        const segment = e.name.slice(0, -DATA_SUFFIX.length);
        items.push({ sortName: segment, segment, dir: false });
      }
    }
    items.sort((a, b) => (a.sortName < b.sortName ? -1 : a.sortName > b.sortName ? 1 : 0));
    for (const item of items) {
      const key = dirKey === '' ? item.segment : `${dirKey}/${item.segment}`;
      if (item.dir) {
        const sub = `${key}/`;
        if (sub.startsWith(prefix) || prefix.startsWith(sub)) yield* this.#walk(key, prefix);
        continue;
      }
      if (!key.startsWith(prefix)) continue;
      try {
        const st = await stat(join(dirPath, item.segment + DATA_SUFFIX));
        yield { key, size: st.size - HEADER_SIZE, lastModified: st.mtime };
      } catch (err) {
        if (!isErrno(err, 'ENOENT')) throw err; // deleted while listing
      }
    }
  }

  async presign(key: string, options: PresignOptions): Promise<string> {
    assertValidKey(key);
    if (options.method === 'PUT' && options.size !== undefined && options.maxBytes !== undefined) {
      if (options.size > options.maxBytes) throw new TooLarge(options.maxBytes);
    }
    const token = this.#signer.sign({
      method: options.method,
      location: this.location,
      key,
      expiresInSeconds: options.expiresInSeconds,
      ...(options.method === 'PUT'
        ? { contentType: options.contentType, maxBytes: options.maxBytes, size: options.size }
        : {}),
    });
    return `${this.#baseUrl}/${token}`;
  }
}
