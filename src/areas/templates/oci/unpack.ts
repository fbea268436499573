// Unpacks image layers, in order, into one root filesystem, as the OCI image spec says a layer
// applies: `.wh.<name>` deletes <name> from the layers below, `.wh..wh..opq` empties its directory of
// what the layers below put there, a later entry replaces an earlier one. Nothing is written outside
// the root: `..` in a name refuses the layer, and every directory on an entry's way is resolved inside
// the root (a symlink to `/` or `../..` leads to the root's own `/`), never followed on the host.
// Owners are shifted into the sandbox uid range; device nodes are skipped (a sandbox gets its own
// /dev). Past `maxBytes` of file content or `maxEntries` entries the build stops (a tar bomb): the
// caller removes the half-made tree.
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, lchown, link, lstat, mkdir, open, readdir, rm, symlink, utimes } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { extract, type Header } from 'tar-stream';
import { resolveInside } from '../../sandboxes/runtime/namespaces/imported-template.js';
import { TemplateBuildError } from './errors.js';

export interface UnpackLimits {
  maxBytes: number;
  maxEntries: number;
}

export interface UnpackStats {
  bytes: number;
  entries: number;
  /** Entries not made: device nodes, fifos; extended attributes not kept. */
  skipped: number;
}

const NOBODY = 65534;

/** Splits a tar name into its parts; `..` anywhere refuses the layer. */
export function entryParts(name: string, layer: string): string[] {
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.some((p) => p === '..')) {
    throw new TemplateBuildError(
      'LayerRefused',
      `layer ${layer} has an entry leading out of the root filesystem (${name.slice(0, 200)}): refused`,
    );
  }
  return parts;
}

/** The layer's bytes as a tar stream: gzip and zstd by their magic numbers (zstd by Debian's `zstd`), else plain tar. */
async function tarStream(path: string): Promise<{ stream: Readable; done: Promise<void> }> {
  const fh = await open(path, 'r');
  const head = Buffer.alloc(4);
  await fh.read(head, 0, 4, 0);
  await fh.close();
  if (head[0] === 0x1f && head[1] === 0x8b) {
    return { stream: createReadStream(path).pipe(createGunzip()), done: Promise.resolve() };
  }
  if (head.readUInt32LE(0) === 0xfd2fb528) {
    const child = spawn('zstd', ['-dc', '--', path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const done = new Promise<void>((resolve, reject) => {
      child.on('error', (e) =>
        reject(
          new TemplateBuildError('BuildFailed', `zstd could not run (Debian package zstd): ${e.message}`),
        ),
      );
      child.on('close', (code) =>
        code === 0 || code === null
          ? resolve()
          : reject(
              new TemplateBuildError(
                'LayerRefused',
                `a zstd layer could not be decompressed: ${err.trim().slice(-300)}`,
              ),
            ),
      );
    });
    done.catch(() => {});
    return { stream: child.stdout, done };
  }
  return { stream: createReadStream(path), done: Promise.resolve() };
}

export class Unpacker {
  /** Directories known to be real directories (not symlinks), by their path inside the root. */
  private dirs = new Map<string, string>();
  readonly stats: UnpackStats = { bytes: 0, entries: 0, skipped: 0 };

  constructor(
    private readonly root: string,
    private readonly ids: { uidBase: number; uidCount: number },
    private readonly limits: UnpackLimits,
  ) {}

  private shift(id: number | undefined): number {
    const n = id ?? 0;
    return this.ids.uidBase + (n >= 0 && n < this.ids.uidCount ? n : NOBODY);
  }

  /** Forget cached directories at or under a removed host path. */
  private forget(host: string): void {
    for (const [k, v] of this.dirs) if (v === host || v.startsWith(`${host}/`)) this.dirs.delete(k);
  }

  private async remove(host: string): Promise<void> {
    await rm(host, { recursive: true, force: true });
    this.forget(host);
  }

  /** The host directory for `parts` inside the root, made (0755, root inside) when missing. */
  private async dirOf(parts: string[], layer: string): Promise<string> {
    if (!parts.length) return this.root;
    const key = parts.join('/');
    const known = this.dirs.get(key);
    if (known) return known;
    const parent = await this.dirOf(parts.slice(0, -1), layer);
    const host = `${parent}/${parts.at(-1)}`;
    const st = await lstat(host).catch(() => null);
    let real = host;
    if (!st) {
      await mkdir(host, { mode: 0o755 });
      await lchown(host, this.ids.uidBase, this.ids.uidBase);
    } else if (st.isSymbolicLink()) {
      const to = await resolveInside(this.root, host.slice(this.root.length));
      const tst = to ? await lstat(to).catch(() => null) : null;
      if (!to || !tst?.isDirectory()) {
        throw new TemplateBuildError(
          'LayerRefused',
          `layer ${layer} writes under /${key}, a symlink that leads to no directory: refused`,
        );
      }
      real = to;
    } else if (!st.isDirectory()) {
      throw new TemplateBuildError(
        'LayerRefused',
        `layer ${layer} writes under /${key}, which is not a directory: refused`,
      );
    }
    this.dirs.set(key, real);
    return real;
  }

  /** Applies one layer (a tar, gzip or zstd file) over what is there. */
  async layer(path: string, layer: string, signal?: AbortSignal): Promise<void> {
    const { stream, done } = await tarStream(path);
    const ex = extract();
    const made = new Set<string>();
    const feeding = pipeline(stream, ex, { signal }).catch((e: unknown) => {
      ex.destroy(e as Error);
    });
    try {
      for await (const entry of ex) {
        await this.entry(entry.header, entry as unknown as Readable, layer, made);
        entry.resume();
      }
      await feeding;
      await done;
    } catch (e) {
      stream.destroy();
      if (signal?.aborted) throw new TemplateBuildError('Canceled', 'the build was canceled');
      if (e instanceof TemplateBuildError) throw e;
      throw new TemplateBuildError(
        'LayerRefused',
        `layer ${layer} is not a valid tar archive: ${(e as Error).message}`,
      );
    }
  }

  private async entry(h: Header, body: Readable, layer: string, made: Set<string>): Promise<void> {
    const parts = entryParts(h.name, layer);
    if (!parts.length) return;
    this.stats.entries++;
    if (this.stats.entries > this.limits.maxEntries) {
      throw new TemplateBuildError(
        'TooLarge',
        `the image has more than ${this.limits.maxEntries} files: refused`,
      );
    }
    const base = parts.at(-1)!;
    const dirParts = parts.slice(0, -1);
    if (base.startsWith('.wh.')) {
      const dir = await this.dirOf(dirParts, layer);
      if (base === '.wh..wh..opq') {
        // Only what lower layers put there: this layer's own entries stay.
        const prefix = dirParts.join('/');
        for (const child of await readdir(dir)) {
          if (!made.has(prefix ? `${prefix}/${child}` : child)) await this.remove(`${dir}/${child}`);
        }
      } else {
        await this.remove(`${dir}/${base.slice(4)}`);
      }
      return;
    }
    const key = parts.join('/');
    made.add(key);
    const dir = await this.dirOf(dirParts, layer);
    const host = `${dir}/${base}`;
    const existing = await lstat(host).catch(() => null);
    const uid = this.shift(h.uid);
    const gid = this.shift(h.gid);
    const mode = (h.mode ?? 0o644) & 0o7777;
    if (h.pax && typeof h.pax === 'object' && Object.keys(h.pax).some((k) => k.startsWith('SCHILY.xattr.')))
      this.stats.skipped++;
    switch (h.type) {
      case 'directory': {
        if (existing && !existing.isDirectory()) await this.remove(host);
        if (!existing?.isDirectory()) await mkdir(host);
        await lchown(host, uid, gid);
        await chmod(host, mode);
        return;
      }
      case 'file':
      case 'contiguous-file': {
        const size = h.size ?? 0;
        this.stats.bytes += size;
        if (this.stats.bytes > this.limits.maxBytes) {
          throw new TemplateBuildError(
            'TooLarge',
            `the image unpacks to more than ${this.limits.maxBytes} bytes (the template size limit): refused`,
          );
        }
        if (existing) await this.remove(host);
        await pipeline(body, createWriteStream(host, { flags: 'wx', mode: 0o600 }));
        await lchown(host, uid, gid);
        await chmod(host, mode);
        if (h.mtime) await utimes(host, h.mtime, h.mtime);
        return;
      }
      case 'symlink': {
        if (existing) await this.remove(host);
        await symlink(h.linkname ?? '', host);
        await lchown(host, uid, gid);
        return;
      }
      case 'link': {
        const tparts = entryParts(h.linkname ?? '', layer);
        if (!tparts.length)
          throw new TemplateBuildError(
            'LayerRefused',
            `layer ${layer} has a hard link to the root directory: refused`,
          );
        const target = `${await this.dirOf(tparts.slice(0, -1), layer)}/${tparts.at(-1)}`;
        const tst = await lstat(target).catch(() => null);
        if (!tst || tst.isDirectory()) {
          throw new TemplateBuildError(
            'LayerRefused',
            `layer ${layer} has a hard link ${key} to ${h.linkname}, which is not a file in the image: refused`,
          );
        }
        if (target === host) return;
        if (existing) await this.remove(host);
        await link(target, host);
        return;
      }
      default:
        // Devices and fifos: a sandbox has its own /dev; nothing else is made.
        this.stats.skipped++;
    }
  }
}
