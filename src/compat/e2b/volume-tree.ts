// A volume's files from the host, for E2B's volume content API. A sandbox may be writing the volume at
// the same moment and may put symlinks anywhere in it, so no path is ever resolved in one go: each name
// is opened relative to its parent's open descriptor (`/proc/self/fd/<fd>/<name>`, Node's openat) with
// O_NOFOLLOW, so a symlink is never followed, however it was swapped in, and nothing outside the volume
// is reached. Errors are nube's ApiErrors (404 for a missing path, as E2B's content API answers).
import { constants as C, type ReadStream, type Stats } from 'node:fs';
import { type FileHandle, lstat, mkdir, open, readdir, readlink, rmdir, unlink } from 'node:fs/promises';
import { constants as os } from 'node:os';
import { ApiError, errors } from '../../platform/errors.js';

const DIR = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
/** Entries one listing answers at most (a deep `depth` on a large tree). */
const MAX_ENTRIES = 10_000;

/** What a new file or directory gets unless the call says: E2B's sandbox user (uid 1000) owns it. */
export const DEFAULT_OWNER = { uid: 1000, gid: 1000 };
/** How a sandbox shows an owner outside its id range (the kernel's overflow id). */
const NOBODY = 65534;

/** The host ids a sandbox's ids are: its uid/gid 0 is `base`, then `count` of them. */
export interface IdMap {
  base: number;
  count: number;
}

export interface Meta {
  uid?: number;
  gid?: number;
  mode?: number;
}

/** E2B's VolumeEntryStat. */
export interface EntryStat {
  name: string;
  path: string;
  type: 'file' | 'directory' | 'symlink' | 'unknown';
  size: number;
  mode: number;
  uid: number;
  gid: number;
  atime: string;
  mtime: string;
  ctime: string;
  target?: string;
}

const at = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`;

/** The names of an absolute path inside the volume (`/` is its root): no `.`, `..` or empty names. */
export function parts(path: string): string[] {
  if (!path.startsWith('/') || path.length > 4096 || path.includes('\0')) {
    throw errors.badRequest('path must be absolute inside the volume', [
      { path: ['query', 'path'], message: 'absolute path' },
    ]);
  }
  const out = path.split('/').filter((p) => p !== '');
  if (out.some((p) => p === '.' || p === '..' || Buffer.byteLength(p) > 255)) {
    throw errors.badRequest('path must not contain . or .. (or a name over 255 bytes)', [
      { path: ['query', 'path'], message: 'no . or ..' },
    ]);
  }
  return out;
}

/** What a failed system call means to the caller. */
function fsError(e: unknown, path: string): unknown {
  const code = (e as NodeJS.ErrnoException).code;
  if (e instanceof ApiError) return e;
  if (code === 'ENOENT') return errors.notFound(`path ${path}`);
  if (code === 'ELOOP') return errors.badRequest(`${path} is or passes through a symlink (not followed)`);
  if (code === 'ENOTDIR') return errors.badRequest(`a part of ${path} is not a directory`);
  if (code === 'EISDIR') return errors.badRequest(`${path} is a directory`);
  if (code === 'EEXIST') return errors.conflict(`${path} exists`, 'Exists');
  if (code === 'ENOTEMPTY') return errors.conflict(`${path} is not empty`, 'NotEmpty');
  // libuv has no name for EDQUOT (btrfs qgroups' answer): it arrives as errno -122 only.
  const quota = code === 'EDQUOT' || (e as NodeJS.ErrnoException).errno === -os.errno.EDQUOT;
  if (quota || code === 'ENOSPC')
    return new ApiError(507, 'VolumeFull', `the volume is full (its limit): ${path} was not written`);
  return e;
}

function typeOf(s: Stats): EntryStat['type'] {
  if (s.isSymbolicLink()) return 'symlink';
  if (s.isDirectory()) return 'directory';
  if (s.isFile()) return 'file';
  return 'unknown';
}

/** Owners as the sandboxes see them. */
function view(s: Stats, ids: IdMap, name: string, path: string, target?: string): EntryStat {
  const inside = (host: number) =>
    host >= ids.base && host < ids.base + ids.count ? host - ids.base : NOBODY;
  return {
    name,
    path,
    type: typeOf(s),
    size: s.size,
    mode: s.mode & 0o7777,
    uid: inside(s.uid),
    gid: inside(s.gid),
    atime: s.atime.toISOString(),
    mtime: s.mtime.toISOString(),
    ctime: s.ctime.toISOString(),
    ...(target !== undefined ? { target } : {}),
  };
}

const join = (names: string[]) => `/${names.join('/')}`;

export class VolumeTree {
  constructor(
    private readonly root: string,
    private readonly ids: IdMap,
  ) {}

  /** The host id of a sandbox's id (400 past the sandboxes' range). */
  private host(id: number, what: 'uid' | 'gid'): number {
    if (id >= this.ids.count)
      throw errors.badRequest(`${what} ${id} is past the sandboxes' ids (0-${this.ids.count - 1})`, [
        { path: ['query', what], message: 'too large' },
      ]);
    return this.ids.base + id;
  }

  /** The directory at `names`, opened without following a symlink anywhere; `create` makes missing ones. */
  private async dir(names: string[], create?: Meta): Promise<FileHandle> {
    let cur = await open(this.root, DIR);
    try {
      for (const name of names) {
        let next: FileHandle;
        try {
          next = await open(at(cur, name), DIR);
        } catch (e) {
          if (!create || (e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
          await mkdir(at(cur, name), 0o755).catch((x: NodeJS.ErrnoException) => {
            if (x.code !== 'EEXIST') throw x;
          });
          next = await open(at(cur, name), DIR);
          await this.own(next, create, 0o755);
        }
        await cur.close();
        cur = next;
      }
      return cur;
    } catch (e) {
      await cur.close();
      throw e;
    }
  }

  /** fn with the parent directory of `names` (not the root itself) and the last name. */
  private async inParent<T>(
    path: string,
    fn: (dir: FileHandle, name: string) => Promise<T>,
    create?: Meta,
  ): Promise<T> {
    const names = parts(path);
    if (!names.length)
      throw errors.badRequest('this needs a path below the volume root', [
        { path: ['query', 'path'], message: 'the root' },
      ]);
    try {
      const dir = await this.dir(names.slice(0, -1), create);
      try {
        return await fn(dir, names.at(-1)!);
      } finally {
        await dir.close();
      }
    } catch (e) {
      throw fsError(e, path);
    }
  }

  private async own(h: FileHandle, m: Meta, mode: number): Promise<void> {
    await h.chown(this.host(m.uid ?? DEFAULT_OWNER.uid, 'uid'), this.host(m.gid ?? DEFAULT_OWNER.gid, 'gid'));
    await h.chmod(m.mode ?? mode);
  }

  private async statAt(dir: FileHandle, name: string, path: string): Promise<EntryStat> {
    const s = await lstat(at(dir, name));
    return view(s, this.ids, name, path, s.isSymbolicLink() ? await readlink(at(dir, name)) : undefined);
  }

  async stat(path: string): Promise<EntryStat> {
    if (!parts(path).length) {
      const root = await open(this.root, DIR);
      try {
        return view(await root.stat(), this.ids, '', '/');
      } finally {
        await root.close();
      }
    }
    return this.inParent(path, (dir, name) => this.statAt(dir, name, join(parts(path))));
  }

  /** Entries under a directory, `depth` levels down (1: its own entries); symlinked directories are not entered. */
  async list(path: string, depth: number): Promise<EntryStat[]> {
    const names = parts(path);
    const out: EntryStat[] = [];
    const walk = async (dir: FileHandle, prefix: string[], level: number) => {
      for (const name of (await readdir(`/proc/self/fd/${dir.fd}`)).sort()) {
        if (out.length >= MAX_ENTRIES)
          throw errors.badRequest(
            `more than ${MAX_ENTRIES} entries: ask for a smaller depth or a subdirectory`,
          );
        const e = await this.statAt(dir, name, join([...prefix, name])).catch(() => null);
        if (!e) continue; // gone meanwhile
        out.push(e);
        if (e.type !== 'directory' || level >= depth) continue;
        const sub = await open(at(dir, name), DIR).catch(() => null);
        if (!sub) continue;
        try {
          await walk(sub, [...prefix, name], level + 1);
        } finally {
          await sub.close();
        }
      }
    };
    try {
      const dir = await this.dir(names);
      try {
        await walk(dir, names, 1);
      } finally {
        await dir.close();
      }
    } catch (e) {
      throw fsError(e, path);
    }
    return out;
  }

  /** A new directory; `parents`: make the missing ones on the way (and an existing one is no error). */
  async makeDir(path: string, m: Meta, parents: boolean): Promise<EntryStat> {
    return this.inParent(
      path,
      async (dir, name) => {
        try {
          await mkdir(at(dir, name), 0o755);
        } catch (e) {
          if (!parents || (e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
          return this.statAt(dir, name, join(parts(path)));
        }
        const h = await open(at(dir, name), DIR);
        try {
          await this.own(h, m, 0o755);
        } finally {
          await h.close();
        }
        return this.statAt(dir, name, join(parts(path)));
      },
      parents ? m : undefined,
    );
  }

  /**
   * Writes a file; its parent must exist. A new file gets the owner and mode asked for (else E2B's user,
   * 0644); one there is replaced unless `overwrite` is false, keeping its owner and mode unless asked.
   */
  async write(path: string, data: Buffer, m: Meta, overwrite: boolean): Promise<EntryStat> {
    return this.inParent(path, async (dir, name) => {
      const base = C.O_WRONLY | C.O_NOFOLLOW;
      let created = true;
      const h = await open(at(dir, name), base | C.O_CREAT | C.O_EXCL, 0o644).catch(
        (e: NodeJS.ErrnoException) => {
          if (e.code !== 'EEXIST' || !overwrite) throw e;
          created = false;
          return open(at(dir, name), base | C.O_TRUNC);
        },
      );
      try {
        if (!(await h.stat()).isFile()) throw errors.badRequest(`${path} is not a regular file`);
        await h.writeFile(data);
        if (created) await this.own(h, m, 0o644);
        else await this.change(h, m);
      } finally {
        await h.close();
      }
      return this.statAt(dir, name, join(parts(path)));
    });
  }

  /** A regular file's bytes, streamed from its open descriptor. */
  async read(path: string): Promise<{ stream: ReadStream; size: number }> {
    return this.inParent(path, async (dir, name) => {
      const h = await open(at(dir, name), C.O_RDONLY | C.O_NOFOLLOW);
      const s = await h.stat().catch(async (e: unknown) => {
        await h.close();
        throw e;
      });
      if (!s.isFile()) {
        await h.close();
        throw errors.badRequest(`${path} is ${s.isDirectory() ? 'a directory' : 'not a regular file'}`);
      }
      return { stream: h.createReadStream({ autoClose: true }), size: s.size };
    });
  }

  /** What of owner and mode `m` gives, changed on an open file or directory. */
  private async change(h: FileHandle, m: Meta): Promise<void> {
    const s = await h.stat();
    if (m.uid !== undefined || m.gid !== undefined) {
      await h.chown(
        m.uid !== undefined ? this.host(m.uid, 'uid') : s.uid,
        m.gid !== undefined ? this.host(m.gid, 'gid') : s.gid,
      );
    }
    if (m.mode !== undefined) await h.chmod(m.mode);
  }

  /** Owner and mode of a file or directory (a symlink's own are not changed: 400). */
  async update(path: string, m: Meta): Promise<EntryStat> {
    const apply = (h: FileHandle) => this.change(h, m);
    if (!parts(path).length) {
      const root = await open(this.root, DIR);
      try {
        await apply(root);
      } finally {
        await root.close();
      }
      return this.stat('/');
    }
    return this.inParent(path, async (dir, name) => {
      const h = await open(at(dir, name), C.O_RDONLY | C.O_NOFOLLOW);
      try {
        await apply(h);
      } finally {
        await h.close();
      }
      return this.statAt(dir, name, join(parts(path)));
    });
  }

  /** Removes a file, a symlink (not what it points to) or a directory with everything in it. */
  async remove(path: string): Promise<void> {
    const rm = async (dir: FileHandle, name: string): Promise<void> => {
      const s = await lstat(at(dir, name));
      if (!s.isDirectory()) return unlink(at(dir, name));
      const sub = await open(at(dir, name), DIR);
      try {
        for (const child of await readdir(`/proc/self/fd/${sub.fd}`)) await rm(sub, child);
      } finally {
        await sub.close();
      }
      await rmdir(at(dir, name));
    };
    await this.inParent(path, rm);
  }
}
