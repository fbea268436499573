import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

/** Random string over [0-9a-z] (unbiased: rejection sampling on bytes). */
export function randomToken(length: number, alphabet = ALPHABET): string {
  const out: string[] = [];
  const max = 256 - (256 % alphabet.length);
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < max) out.push(alphabet[b % alphabet.length]!);
      if (out.length === length) break;
    }
  }
  return out.join('');
}

export const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/**
 * Time-ordered id: `<prefix>_<9 chars of ms time, base36><12 random>`. Sorting ids sorts by creation
 * time, which keeps cursor pagination stable under concurrent inserts.
 */
export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}_${now.toString(36).padStart(9, '0')}${randomToken(12)}`;
}

/** An opaque list cursor: the last id of the page (ids are time-ordered, so `id <` is stable under inserts). */
export const idCursor = (id: string): string => Buffer.from(id).toString('base64url');

/** The id a cursor of `idCursor` carries, or undefined when it is not one of `prefix`'s ids. */
export function idFromCursor(cursor: string, prefix: string): string | undefined {
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  return new RegExp(`^${prefix}_[0-9a-z]{9,40}$`).test(id) ? id : undefined;
}
