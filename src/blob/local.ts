import { randomUUID } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { copyFile, type FileHandle, mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { DurableWriter } from './durable-writer.js';
import { InvalidRange, NotFound, TooLarge } from './errors.js';
import { assertValidKey, assertValidPrefix } from './keys.js';
import { encodeHeader, HEADER_SIZE, parseHeader, writeAll } from './local-format.js';
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
/** Data bytes read along with the header: an object this small is served from that one read. */
const SMALL_READ = 64 * 1024;
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
  readonly #writer = new DurableWriter();

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

  /**
   * Streams `body` to a temp file, hashing it, then renames it into place. A small object (one batch,
   * most uploads) is committed as one job on the durable writer's threads (see durable-writer.ts).
   */
  async put(key: string, body: BlobBody, options: PutOptions = {}): Promise<PutResult> {
    const dest = this.pathFor(key);
    checkPutOptions(options);
    const meter = new Meter(options);
    const source = iterateBody(body)[Symbol.asyncIterator]();
    // The first batch decides: a body that ends within it is a small object.
    const first: Buffer[] = [];
    let firstBytes = 0;
    let ended = false;
    try {
      while (firstBytes < WRITE_BATCH_BYTES && first.length < WRITE_BATCH_COUNT) {
        const next = await source.next();
        if (next.done) {
          ended = true;
          break;
        }
        const chunk = toBuffer(next.value);
        if (chunk.byteLength === 0) continue;
        meter.add(chunk);
        first.push(chunk);
        firstBytes += chunk.byteLength;
      }
    } catch (err) {
      await source.return?.();
      throw err;
    }
    const contentType = options.contentType ?? DEFAULT_TYPE;
    if (ended) {
      const { size, sha256 } = meter.finish();
      await this.#writer.commit(join(this.#root, TMP_DIR, randomUUID()), dest, [encodeHeader({ contentType, sha256, size }), ...first]);
      return { size, sha256, etag: sha256 };
    }
    let result: { size: number; sha256: string } | undefined;
    await this.#commit(dest, 'wx', async (fh) => {
      // One write in flight while the next batch is read and hashed, so disk and input overlap.
      let inFlight: Promise<void> = Promise.resolve();
      try {
        let pos = HEADER_SIZE;
        let batch: Buffer[] = first;
        let batched = firstBytes;
        const flush = async () => {
          await inFlight;
          inFlight = writeAll(fh, batch, pos);
          // Keep a rejection from being reported as unhandled before the next await picks it up.
          inFlight.catch(() => {});
          pos += batched;
          batch = [];
          batched = 0;
        };
        await flush();
        for await (const raw of { [Symbol.asyncIterator]: () => source }) {
          const chunk = toBuffer(raw);
          if (chunk.byteLength === 0) continue;
          meter.add(chunk);
          batch.push(chunk);
          batched += chunk.byteLength;
          if (batched >= WRITE_BATCH_BYTES || batch.length >= WRITE_BATCH_COUNT) await flush();
        }
        if (batched > 0) await flush();
        await inFlight;
        result = meter.finish();
        await writeAll(fh, [encodeHeader({ contentType, ...result })], 0);
        await fh.sync();
      } finally {
        await inFlight.catch(() => {});
      }
    });
    const { size, sha256 } = result!;
    return { size, sha256, etag: sha256 };
  }

  /**
   * Creates a temp file, lets `write` fill it (durably), then renames it to `dest` and makes the
   * rename durable. Nothing is left behind when any step fails.
   */
  async #commit(dest: string, flags: string | number, write: (fh: FileHandle, tmp: string) => Promise<void>): Promise<void> {
    const tmp = join(this.#root, TMP_DIR, randomUUID());
    let fh: FileHandle;
    try {
      fh = await open(tmp, flags, 0o640);
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
      await mkdir(dirname(tmp), { recursive: true });
      fh = await open(tmp, flags, 0o640);
    }
    let committed = false;
    let closing: Promise<void> | undefined;
    try {
      await write(fh, tmp);
      // The bytes are durable: the file may close while it is renamed.
      closing = fh.close();
      closing.catch(() => {});
      await this.#renameInto(tmp, dest);
      committed = true;
      await Promise.all([closing, fsyncDir(dirname(dest))]);
    } finally {
      if (!closing) await fh.close().catch(() => {});
      if (!committed) await rm(tmp, { force: true });
    }
  }

  /** rename(2), creating the destination's folders only when it finds none. */
  async #renameInto(from: string, to: string): Promise<void> {
    try {
      await rename(from, to);
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
      await mkdir(dirname(to), { recursive: true });
      await rename(from, to);
    }
  }

  /** Closes the threads that commit small objects. */
  close(): void {
    this.#writer.close();
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

  /**
   * Header and stat in one round trip, with the first `SMALL_READ` bytes of data read along: a small
   * object needs no further read.
   */
  async #describe(fh: FileHandle, path: string): Promise<BlobHead & { first: Buffer }> {
    const buf = Buffer.allocUnsafe(HEADER_SIZE + SMALL_READ);
    const [{ bytesRead }, st] = await Promise.all([fh.read(buf, 0, buf.length, 0), fh.stat()]);
    const meta = parseHeader(buf.subarray(0, bytesRead), path);
    // The etag is the content hash: identical bytes give identical tags, even across copies.
    return {
      size: meta.size,
      contentType: meta.contentType,
      etag: meta.sha256,
      lastModified: st.mtime,
      first: buf.subarray(HEADER_SIZE, bytesRead),
    };
  }

  async get(key: string, options: GetOptions = {}): Promise<GetResult> {
    const { fh, path } = await this.#openExisting(key);
    let closing = false;
    try {
      const { first, ...head } = await this.#describe(fh, path);
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
      if (end < first.length) {
        // Read whole already: the file closes in the background.
        closing = true;
        fh.close().catch(() => {});
        const bytes = contentLength > 0 ? [first.subarray(start, end + 1)] : [];
        return { ...head, stream: Readable.from(bytes, { objectMode: false }), contentLength: Math.max(0, contentLength), range };
      }
      const stream = fh.createReadStream({ start: HEADER_SIZE + start, end: HEADER_SIZE + end, highWaterMark: READ_CHUNK });
      return { ...head, stream, contentLength, range };
    } catch (err) {
      if (!closing) await fh.close();
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
      const { first: _first, ...head } = await this.#describe(opened.fh, opened.path);
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
    await this.#commit(this.pathFor(to), 'wx', async (fh, tmp) => {
      try {
        // Onto the temp file (the same inode as `fh`). FICLONE makes it a reflink on filesystems that
        // can (btrfs, xfs), a plain copy elsewhere.
        await copyFile(src, tmp, fsConstants.COPYFILE_FICLONE);
      } catch (err) {
        if (isErrno(err, 'ENOENT', 'ENOTDIR')) throw new NotFound(from);
        throw err;
      }
      await fh.sync();
    });
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
