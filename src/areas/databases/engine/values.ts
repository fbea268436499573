import { DatabaseEngineError } from './errors.js';
import { type ArgValue, realArg } from './exact-reals.js';
import type { SqlArg, SqlArgs, SqlValue } from './schemas.js';

// Encoding rules: see the comment at the top of schemas.ts.
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = -MAX_SAFE;

/** SQLite value as read with readBigInts (INTEGER -> bigint, REAL -> number) -> wire value. */
export function encodeValue(v: unknown): SqlValue {
  if (v === null || typeof v === 'string') return v;
  if (typeof v === 'bigint') return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : { integer: v.toString() };
  if (typeof v === 'number') {
    // JSON has no -0 (JSON.stringify prints 0): it is spelled out, like the infinities.
    if (Number.isFinite(v)) return Object.is(v, -0) ? { real: '-0' } : v;
    return { real: v > 0 ? 'Infinity' : '-Infinity' };
  }
  if (v instanceof Uint8Array)
    return { base64: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') };
  throw new DatabaseEngineError('SQLITE_MISMATCH', `unexpected value type from SQLite: ${typeof v}`);
}

/** Rough wire size of an encoded value, for the result-size cap. */
export function encodedSize(v: SqlValue): number {
  if (v === null) return 4;
  if (typeof v === 'string') return v.length + 2;
  if (typeof v === 'number') return 8;
  if ('base64' in v) return v.base64.length + 12;
  return 24;
}

/** Wire argument -> value the binding can bind (an ExactReal where it would make a REAL an INTEGER). */
export function decodeArg(a: SqlArg): ArgValue {
  if (a === null) return a;
  if (typeof a === 'string') {
    // The binding hands text to SQLite as a C string: whatever follows a NUL would be dropped silently.
    if (a.includes('\0')) {
      throw new DatabaseEngineError(
        'InvalidRequest',
        'a text argument contains NUL (U+0000), which would be cut there; send such bytes as a blob: { "base64": "..." }',
      );
    }
    return a;
  }
  if (typeof a === 'boolean') return a ? 1 : 0;
  if (typeof a === 'number') {
    // Integral numbers bind as INTEGER (exactly what `1` in SQL text would be); others as REAL.
    if (Number.isInteger(a)) return Number.isSafeInteger(a) ? BigInt(a) : a;
    return realArg(a);
  }
  if (typeof a === 'object') {
    if ('integer' in a && typeof a.integer === 'string') return parseBigInteger(a.integer);
    if ('base64' in a && typeof a.base64 === 'string') return new Uint8Array(Buffer.from(a.base64, 'base64'));
    if ('real' in a) {
      const r = a.real;
      if (typeof r === 'number') return realArg(r);
      if (r === 'Infinity') return Number.POSITIVE_INFINITY;
      if (r === '-Infinity') return Number.NEGATIVE_INFINITY;
      if (r === '-0') return realArg(-0);
    }
  }
  throw new DatabaseEngineError('InvalidRequest', `unsupported argument value: ${JSON.stringify(a)}`);
}

function parseBigInteger(s: string): bigint {
  if (!/^-?\d{1,20}$/.test(s)) throw new DatabaseEngineError('InvalidRequest', `invalid integer: ${s}`);
  const n = BigInt(s);
  if (n > 9223372036854775807n || n < -9223372036854775808n) {
    throw new DatabaseEngineError('InvalidRequest', `integer out of 64-bit range: ${s}`);
  }
  return n;
}

/** `{ real: -0 }` as `{ real: '-0' }`: requests reach executors as JSON, which prints -0 as 0. */
export function wireArg(a: SqlArg): SqlArg {
  return a !== null && typeof a === 'object' && 'real' in a && Object.is(a.real, -0) ? { real: '-0' } : a;
}

function hasNegativeZero(args: SqlArg[]): boolean {
  return args.some((a) => a !== null && typeof a === 'object' && 'real' in a && Object.is(a.real, -0));
}

/** wireArg over a request's args (the same object when nothing needs it, the usual case). */
export function wireArgs<T extends SqlArgs | undefined>(args: T): T {
  if (args === undefined) return args;
  if (Array.isArray(args)) return (hasNegativeZero(args) ? args.map(wireArg) : args) as T;
  const values = Object.values(args);
  if (!hasNegativeZero(values)) return args;
  return Object.fromEntries(Object.entries(args).map(([k, v]) => [k, wireArg(v)])) as T;
}

/** Positional args -> array; named args -> object (keys may carry the :, @ or $ prefix or not). */
export function decodeArgs(args: SqlArgs | undefined): ArgValue[] | Record<string, ArgValue> {
  if (args === undefined) return [];
  if (Array.isArray(args)) return args.map(decodeArg);
  const out: Record<string, ArgValue> = {};
  for (const [k, v] of Object.entries(args)) out[k] = decodeArg(v);
  return out;
}

/** Quote an SQL identifier: the only way names from requests ever reach SQL text. */
export function quoteIdent(name: string): string {
  if (name.length === 0 || name.includes('\0')) {
    throw new DatabaseEngineError('InvalidRequest', 'identifiers must be non-empty and contain no NUL');
  }
  return `"${name.replaceAll('"', '""')}"`;
}
