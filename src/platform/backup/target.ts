// Where a backup goes and where a restore reads it: a directory, or an S3 prefix (`s3://bucket/prefix`).
// Both work on a local directory of plain files: a directory target is written in place; an S3 one is
// staged in a temp directory and uploaded file by file. Either way the manifest goes last (renamed into
// place, or uploaded after every file), so an interrupted backup has no manifest and is never taken
// for a complete one.
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type BlobStore, makeS3Client, NotFound, S3BlobStore } from '../../blob/index.js';
import type { Config } from '../config-shape.js';
import { MANIFEST } from './manifest.js';

export interface BackupWriter {
  readonly describe: string;
  /** Where the backup's files are written (the target itself, or a staging directory). */
  readonly dir: string;
  /** Makes the files in `dir` the backup, the manifest last; `progress` is told each upload. */
  commit(files: string[], manifest: string, progress: (line: string) => void): Promise<void>;
  /** After a failure: removes what an S3 backup staged (a directory target keeps its partial files, with no manifest). */
  abandon(): Promise<void>;
}

export interface BackupReader {
  readonly describe: string;
  /** The manifest's text; throws when there is none (an interrupted backup, or not a backup). */
  manifest(): Promise<string>;
  /** A local directory holding the backup's files (downloaded first for S3). */
  fetch(files: string[], progress: (line: string) => void): Promise<string>;
  close(): Promise<void>;
}

const S3_URL = /^s3:\/\/([^/]+)\/?(.*)$/;

/** `~` is kept out of blob keys (blob/keys.ts) and local blob files end with it: escaped in S3 keys. */
const s3Key = (path: string) => path.replace(/%/g, '%25').replace(/~/g, '%7E');

function s3Store(config: Config, url: string): { store: BlobStore; describe: string } {
  const m = S3_URL.exec(url);
  if (!m) throw new Error(`${url}: an S3 location is s3://bucket/prefix`);
  const prefix = m[2]!.replace(/\/+$/, '');
  const client = makeS3Client(config.backupS3);
  return { store: new S3BlobStore({ location: 'backup', client, bucket: m[1]!, prefix: prefix || undefined }), describe: url };
}

async function isEmptyDir(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw e;
  }
}

async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export async function backupWriter(config: Config, to: string): Promise<BackupWriter> {
  if (to.startsWith('s3://')) {
    const { store, describe } = s3Store(config, to);
    if (await store.head(MANIFEST)) throw new Error(`${describe} already holds a backup: give another prefix`);
    const dir = await mkdtemp(join(tmpdir(), 'nube-backup-'));
    return {
      describe,
      dir,
      async commit(files, manifest, progress) {
        let n = 0;
        for (const f of files) {
          await store.put(s3Key(f), createReadStream(join(dir, f)));
          progress(`uploaded ${++n}/${files.length} ${f}`);
        }
        await store.put(MANIFEST, Readable.from([Buffer.from(manifest)]), { contentType: 'application/json' });
        await rm(dir, { recursive: true, force: true });
      },
      abandon: () => rm(dir, { recursive: true, force: true }),
    };
  }
  const dir = resolve(to);
  if (!(await isEmptyDir(dir)))
    throw new Error(
      `${dir} is not empty${(await stat(join(dir, MANIFEST)).catch(() => null)) ? ' (it holds a backup)' : ' (an interrupted backup?)'}: give an empty or new directory`,
    );
  // It holds secret.key and the metadata store: no other user of the host may read it, even where the
  // directory was made beforehand with a looser mode.
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  return {
    describe: dir,
    dir,
    async commit(files, manifest) {
      for (const f of files) await fsyncPath(join(dir, f));
      const tmp = join(dir, `${MANIFEST}.partial`);
      await writeFile(tmp, manifest);
      await fsyncPath(tmp);
      await rename(tmp, join(dir, MANIFEST));
      await fsyncPath(dir);
    },
    abandon: async () => {},
  };
}

export async function backupReader(config: Config, from: string): Promise<BackupReader> {
  const incomplete = (where: string) =>
    new Error(`${where} holds no ${MANIFEST}: not a backup, or a backup that was interrupted before it completed`);
  if (from.startsWith('s3://')) {
    const { store, describe } = s3Store(config, from);
    let staged: string | undefined;
    return {
      describe,
      async manifest() {
        try {
          const r = await store.get(MANIFEST);
          const chunks: Buffer[] = [];
          for await (const c of r.stream) chunks.push(c as Buffer);
          return Buffer.concat(chunks).toString('utf8');
        } catch (e) {
          if (e instanceof NotFound) throw incomplete(describe);
          throw e;
        }
      },
      async fetch(files, progress) {
        staged = await mkdtemp(join(tmpdir(), 'nube-restore-'));
        let n = 0;
        for (const f of files) {
          const dest = join(staged, f);
          await mkdir(dirname(dest), { recursive: true });
          try {
            await pipeline((await store.get(s3Key(f))).stream, createWriteStream(dest));
          } catch (e) {
            if (e instanceof NotFound) throw new Error(`the backup is damaged: ${f} is missing from ${describe}`);
            throw e;
          }
          progress(`downloaded ${++n}/${files.length} ${f}`);
        }
        return staged;
      },
      close: async () => {
        if (staged) await rm(staged, { recursive: true, force: true });
      },
    };
  }
  const dir = resolve(from);
  return {
    describe: dir,
    async manifest() {
      try {
        return await readFile(join(dir, MANIFEST), 'utf8');
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw incomplete(dir);
        throw e;
      }
    },
    fetch: async () => dir,
    close: async () => {},
  };
}
