import type { ByteRange } from './types.js';

export type RangeDecision =
  | { kind: 'full' }
  | { kind: 'partial'; range: ByteRange }
  | { kind: 'unsatisfiable' };

/**
 * Parses a `Range` header against an object of `size` bytes (RFC 9110 §14). Only single ranges are
 * served: a multi-range request gets the whole object (allowed by the RFC, and what many CDNs do).
 * A unit other than `bytes` is ignored; a malformed or unsatisfiable `bytes` range is a 416.
 */
export function parseRange(header: string | undefined, size: number): RangeDecision {
  if (header === undefined) return { kind: 'full' };
  const m = /^\s*([A-Za-z]+)\s*=\s*(.*)$/.exec(header);
  if (!m) return { kind: 'unsatisfiable' };
  if (m[1].toLowerCase() !== 'bytes') return { kind: 'full' };
  const specs = m[2].split(',').map((s) => s.trim());
  if (specs.length > 1) return specs.every((s) => /^(\d+-\d*|-\d+)$/.test(s)) ? { kind: 'full' } : { kind: 'unsatisfiable' };
  const spec = specs[0];
  let r = /^(\d+)-(\d*)$/.exec(spec);
  if (r) {
    const start = Number(r[1]);
    const end = r[2] === '' ? size - 1 : Math.min(Number(r[2]), size - 1);
    if (r[2] !== '' && Number(r[2]) < start) return { kind: 'unsatisfiable' };
    if (start >= size) return { kind: 'unsatisfiable' };
    return { kind: 'partial', range: { start, end } };
  }
  r = /^-(\d+)$/.exec(spec);
  if (r) {
    const suffix = Number(r[1]);
    if (suffix === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'partial', range: { start: Math.max(0, size - suffix), end: size - 1 } };
  }
  return { kind: 'unsatisfiable' };
}

/** `If-None-Match` uses the weak comparison: `W/"x"` matches `"x"`. */
export function etagMatches(header: string, etag: string): boolean {
  if (header.trim() === '*') return true;
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === `"${etag}"`);
}

/** `If-Range` uses the strong comparison, or an HTTP date that must equal Last-Modified. */
export function ifRangeHolds(header: string, etag: string, lastModified: Date): boolean {
  const h = header.trim();
  if (h.startsWith('"')) return h === `"${etag}"`;
  if (h.startsWith('W/')) return false;
  const t = Date.parse(h);
  return !Number.isNaN(t) && Math.floor(lastModified.getTime() / 1000) === Math.floor(t / 1000);
}
