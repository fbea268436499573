// Bytes a user hands nube that are too large to hold in memory (archives, sources, backups) wait on
// disk, in a directory nube owns (`<data dir>/spool/<area>`), each under a size cap, and are removed
// when the request is done with them. A crash can leave some behind: the directory is emptied when
// nube starts (one process per data directory).
import { randomUUID } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/** A file in the spool: its size, its first bytes (to tell its format), and how to get rid of it. */
export interface SpooledFile {
  path: string;
  size: number;
  /** Up to the first 512 bytes. */
  head: Buffer;
  remove(): Promise<void>;
}

/** A private directory in the spool, removed whole with everything in it. */
export interface Scratch {
  dir: string;
  remove(): Promise<void>;
}

const HEAD_BYTES = 512;

export class Spool {
  constructor(readonly dir: string) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
  }

  async scratch(): Promise<Scratch> {
    const dir = join(this.dir, randomUUID());
    await mkdir(dir);
    return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
  }

  /**
   * Writes `body` to a new file of the spool. Past `maxBytes` the copy stops, the partial file is
   * removed and `tooLarge()` is thrown; any other failure removes it too.
   */
  async take(body: Readable | AsyncIterable<Uint8Array>, maxBytes: number, tooLarge: () => Error): Promise<SpooledFile> {
    const path = join(this.dir, randomUUID());
    const meter = new SizeCap(maxBytes, tooLarge);
    try {
      await pipeline(body, meter, createWriteStream(path, { flags: 'wx' }));
    } catch (e) {
      await rm(path, { force: true });
      throw e;
    }
    return { path, size: meter.bytes, head: meter.head(), remove: () => rm(path, { force: true }) };
  }
}

/** Passes bytes through up to a cap (then fails with `tooLarge()`), counting them and keeping the first ones. */
export class SizeCap extends Transform {
  bytes = 0;
  private readonly first: Buffer[] = [];
  private kept = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly tooLarge: () => Error,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: (e?: Error | null, c?: Buffer) => void): void {
    this.bytes += chunk.length;
    if (this.bytes > this.maxBytes) {
      done(this.tooLarge());
      return;
    }
    if (this.kept < HEAD_BYTES) {
      const part = chunk.subarray(0, HEAD_BYTES - this.kept);
      this.first.push(Buffer.from(part));
      this.kept += part.length;
    }
    done(null, chunk);
  }

  head(): Buffer {
    return Buffer.concat(this.first);
  }
}
