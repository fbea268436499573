import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { lookup } from 'mime-types';
import type { BlobBody } from '../../blob/index.js';
import { errors } from '../../platform/errors.js';

/** One file of a site in memory (a document's pages): its path under the site root (no leading slash) and its bytes. */
export interface SiteFile {
  path: string;
  data: Buffer;
  /** When the path's extension does not tell (a document's images are `assets/<file id>`). */
  contentType?: string;
}

/** One file of a site wherever its bytes are (unpacked archives wait on disk), with its size and hash. */
export interface SiteEntry {
  path: string;
  size: number;
  sha256: string;
  contentType?: string;
  /** The bytes, from the start, each time it is called. */
  open(): BlobBody;
}

export function entryOf(f: SiteFile): SiteEntry {
  return {
    path: f.path,
    size: f.data.length,
    sha256: createHash('sha256').update(f.data).digest('hex'),
    contentType: f.contentType,
    open: () => Readable.from([f.data]),
  };
}

export const SITE_LIMITS = {
  files: 5_000,
  /** Sum of the files' sizes, uncompressed. */
  totalBytes: 200 * 1024 * 1024,
  /** The archive itself (a files-area file or an upload). */
  archiveBytes: 100 * 1024 * 1024,
};

const JUNK = [/^__MACOSX\//, /(^|\/)\.DS_Store$/, /(^|\/)Thumbs\.db$/];

const refuse = (path: string, why: string) =>
  errors.badRequest(
    `archive entry "${path.slice(0, 200)}" ${why}`,
    [{ path: ['archive'], message: why }],
    'InvalidArchive',
  );

/**
 * The site path of an archive entry, or null for an entry to skip (directories, OS junk). Paths are
 * only ever used as lookup keys (never joined onto a directory), and anything that could mean
 * "elsewhere" is refused outright: absolute paths, `..`, backslashes, control characters.
 */
export function sitePath(raw: string): string | null {
  let p = raw.replace(/^(\.\/)+/, '');
  if (p === '' || p.endsWith('/')) return null;
  if (p.startsWith('/')) throw refuse(raw, 'is an absolute path');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (/[\\\u0000-\u001f\u007f]/.test(p)) throw refuse(raw, 'has a backslash or a control character');
  const segments = p.split('/');
  if (segments.some((s) => s === '' || s === '.' || s === '..'))
    throw refuse(raw, 'leaves its folder (empty, . or .. segment)');
  if (p.length > 1024) throw refuse(raw, 'has a path longer than 1024 characters');
  p = segments.join('/');
  return JUNK.some((re) => re.test(p)) ? null : p;
}

/**
 * Archives made by "compress this folder" hold everything under one top folder; when the root has no
 * index.html and every file shares one folder that has one, that folder becomes the root.
 */
export function stripCommonFolder<T extends { path: string }>(files: T[]): T[] {
  if (files.some((f) => f.path === 'index.html')) return files;
  const top = files[0]?.path.split('/')[0];
  if (!top || !files.every((f) => f.path.startsWith(`${top}/`))) return files;
  if (!files.some((f) => f.path === `${top}/index.html`)) return files;
  return files.map((f) => ({ ...f, path: f.path.slice(top.length + 1) }));
}

/** Checks the whole set once paths are final: count, size, duplicates, an index.html at the root. */
export function checkSite<T extends { path: string }>(files: T[]): T[] {
  if (files.length === 0) throw errors.badRequest('the archive holds no file', undefined, 'InvalidArchive');
  if (files.length > SITE_LIMITS.files) {
    throw errors.badRequest(`a site holds at most ${SITE_LIMITS.files} files`, undefined, 'SiteTooLarge');
  }
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.path)) throw refuse(f.path, 'appears twice');
    seen.add(f.path);
  }
  if (!seen.has('index.html')) {
    throw errors.badRequest(
      'a site needs an index.html at its root (or in its only top folder)',
      undefined,
      'SiteHasNoIndex',
    );
  }
  return files;
}

/** Content type of a site file by its extension; text types carry charset=utf-8. */
export function contentTypeOf(path: string): string {
  const type = lookup(path) || 'application/octet-stream';
  if (
    type.startsWith('text/') ||
    type === 'application/javascript' ||
    type === 'application/json' ||
    type === 'image/svg+xml'
  ) {
    return `${type}; charset=utf-8`;
  }
  return type;
}
