// A build context (a .tar or .tar.gz) held in memory as entries by normalized path, and what a COPY
// or ADD reads of it: the entries under each source (a file, a directory's contents, or a `*`/`?`
// pattern in the last part), with a digest of exactly those entries for the step's cache key.
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';

export interface ContextEntry {
  path: string;
  type: 'file' | 'directory' | 'symlink';
  mode: number;
  data: Buffer;
  linkname?: string;
}

export class ContextError extends Error {}

/** Reads a tar (gzip or not) into entries; anything past `maxBytes` of content is refused. */
export async function readArchive(bytes: Buffer, maxBytes: number): Promise<Map<string, ContextEntry>> {
  const gz = bytes[0] === 0x1f && bytes[1] === 0x8b;
  const ex = extract();
  const out = new Map<string, ContextEntry>();
  let total = 0;
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (h, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => {
        if (!(c instanceof Buffer)) return;
        total += c.length;
        if (total > maxBytes) {
          reject(new ContextError(`the archive holds more than ${maxBytes} bytes`));
          ex.destroy();
          return;
        }
        chunks.push(c);
      });
      stream.on('end', () => {
        const path = posix.normalize(`/${h.name}`).replace(/\/$/, '') || '/';
        if (path !== '/' && (h.type === 'file' || h.type === 'directory' || h.type === 'symlink'))
          out.set(path, {
            path,
            type: h.type,
            mode: (h.mode ?? 0o644) & 0o7777,
            data: Buffer.concat(chunks),
            linkname: h.linkname ?? undefined,
          });
        next();
      });
      stream.resume();
    });
    ex.on('finish', () => resolve());
    ex.on('error', (e) => reject(new ContextError(`not a tar archive: ${e.message}`)));
  });
  const src = Readable.from([bytes]);
  const gunzip = gz ? createGunzip() : null;
  gunzip?.on('error', (e) => ex.destroy(new ContextError(`not a gzip archive: ${e.message}`)));
  (gunzip ? src.pipe(gunzip) : src).pipe(ex);
  await done;
  return out;
}

function pattern(part: string): RegExp {
  const re = part.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]');
  return new RegExp(`^${re}$`);
}

export interface Selected {
  /** Each source's entries, with the path they get under the destination (relative). */
  items: { source: string; entries: { rel: string; entry: ContextEntry }[]; single: boolean }[];
  digest: string;
}

/** The entries `sources` name in the context; a source naming nothing is a ContextError. */
export function select(ctx: Map<string, ContextEntry>, sources: string[]): Selected {
  const h = createHash('sha256');
  const items: Selected['items'] = [];
  for (const s of sources) {
    const norm = posix.normalize(`/${s}`).replace(/\/$/, '') || '/';
    if (norm.startsWith('/..')) throw new ContextError(`${s} is outside the context`);
    const base = posix.basename(norm);
    const roots: string[] = [];
    if (/[*?]/.test(base)) {
      const dir = posix.dirname(norm);
      const re = pattern(base);
      for (const p of ctx.keys()) if (posix.dirname(p) === dir && re.test(posix.basename(p))) roots.push(p);
    } else if (norm === '/' || ctx.has(norm) || [...ctx.keys()].some((p) => p.startsWith(`${norm}/`))) {
      roots.push(norm);
    }
    if (!roots.length) throw new ContextError(`${s} is not in the context`);
    for (const root of roots.sort()) {
      const e = ctx.get(root);
      const entries: { rel: string; entry: ContextEntry }[] = [];
      if (e && e.type !== 'directory') {
        entries.push({ rel: '', entry: e });
      } else {
        // A directory: its contents (not the directory itself), as docker does.
        const prefix = root === '/' ? '/' : `${root}/`;
        for (const [p, x] of ctx) if (p.startsWith(prefix)) entries.push({ rel: p.slice(prefix.length), entry: x });
        entries.sort((a, b) => (a.rel < b.rel ? -1 : 1));
      }
      items.push({ source: root, entries, single: !!e && e.type !== 'directory' && roots.length === 1 });
      for (const { rel, entry } of entries) {
        h.update(`${root}\0${rel}\0${entry.type}\0${entry.mode}\0${entry.linkname ?? ''}\0`);
        h.update(createHash('sha256').update(entry.data).digest());
      }
    }
  }
  return { items, digest: h.digest('hex') };
}
