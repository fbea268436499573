import { InvalidKey } from './errors.js';

/** S3's own limit on key length, kept for both backends so a key valid on one is valid on the other. */
const MAX_KEY_BYTES = 1024;
/** Leaves room for the local store's `~` suffix under the usual 255-byte file name limit. */
const MAX_SEGMENT_BYTES = 250;

/**
 * `~` is reserved: the local store names data files `<segment>~` and keeps temp files under `~tmp/`, so
 * no key can collide with a directory or a temp file. Control characters and `\` are refused because
 * they are unsafe in file names, logs and URLs.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this refuses
const FORBIDDEN = /[\u0000-\u001f\u007f-\u009f\\~]/;

/** Throws `InvalidKey` unless `key` is a relative, normalized path that cannot escape its location. */
export function assertValidKey(key: string): void {
  if (typeof key !== 'string' || key.length === 0) throw new InvalidKey('key must be a non-empty string');
  if (Buffer.byteLength(key) > MAX_KEY_BYTES) throw new InvalidKey(`key longer than ${MAX_KEY_BYTES} bytes`);
  if (FORBIDDEN.test(key)) throw new InvalidKey('key contains a control character, "\\" or "~"');
  for (const segment of key.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') {
      throw new InvalidKey('key segments must be non-empty and not "." or ".."');
    }
    if (Buffer.byteLength(segment) > MAX_SEGMENT_BYTES) {
      throw new InvalidKey(`key segment longer than ${MAX_SEGMENT_BYTES} bytes`);
    }
  }
}

/** A list prefix may end in `/` or in a partial segment, but must not contain traversal either. */
export function assertValidPrefix(prefix: string): void {
  if (prefix === '') return;
  if (prefix.endsWith('/')) assertValidKey(prefix.slice(0, -1));
  else assertValidKey(prefix);
}
