import { skippedEnd } from './split-sql.js';

/*
 * REAL arguments bound bit for bit. The binding (@photostructure/sqlite) binds a JS number within
 * DBL_EPSILON above an integer in the int32 range with sqlite3_bind_int: 3.0 and -0.0 become the
 * INTEGER 3 and 0, and 5e-324 or 1e-17 the INTEGER 0. Such a value is bound instead as the 8 bytes
 * of its IEEE 754 encoding, and each placeholder it fills is wrapped in `nube_real(...)`, a function
 * registered on every connection that turns those bytes back into the double (a JS number returned
 * from a function is always sqlite3_result_double). Nothing else changes: the wrapped placeholders
 * keep their names and order, so SQLite numbers them as before, and result column names are given
 * back without the wrapper. Only statements with such a value are rewritten.
 */

/** A REAL the binding would bind as an INTEGER. */
export class ExactReal {
  constructor(readonly value: number) {}
}

export const REAL_FUNCTION = 'nube_real';

/** The binding's test for binding a number as an int (sqlite_impl.cpp, BindSingleParameter). */
export function bindsAsInt(v: number): boolean {
  return Math.abs(v - Math.floor(v)) < Number.EPSILON && v >= -2147483648 && v <= 2147483647;
}

/** A REAL value as the binding should get it: the number itself unless it would become an INTEGER. */
export function realArg(v: number): number | ExactReal {
  return bindsAsInt(v) ? new ExactReal(v) : v;
}

/** The function behind `nube_real(?)`: 8 little-endian bytes -> the double they encode. */
export function decodeReal(bytes: unknown): number {
  if (!(bytes instanceof Uint8Array) || bytes.byteLength !== 8) {
    throw new Error(`${REAL_FUNCTION}() takes the 8 bytes of an IEEE 754 double`);
  }
  return new DataView(bytes.buffer, bytes.byteOffset, 8).getFloat64(0, true);
}

function carrier(v: number): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setFloat64(0, v, true);
  return b;
}

/** One parameter token of an SQL text: where it is and which parameter (1-based) SQLite makes it. */
interface Param {
  start: number;
  end: number;
  index: number;
}

interface ParamMap {
  params: Param[];
  /** Name of each parameter index that has one (`:a`, `?3`), as sqlite3_bind_parameter_name gives it. */
  names: Map<number, string>;
  count: number;
}

const ID_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;
const DIGIT = /[0-9]/;

/**
 * The parameters of `sql`, numbered as SQLite's parser numbers them (sqlite3ExprAssignVarNumber, in
 * text order): `?` takes the next number, `?NNN` the number NNN, a name its first number. Tokens
 * are skipped as SQLite's tokenizer skips them: strings, quoted names, comments.
 */
export function scanParams(sql: string): ParamMap {
  const params: Param[] = [];
  const names = new Map<number, string>();
  const byName = new Map<string, number>();
  let count = 0;
  const n = sql.length;
  let i = 0;
  while (i < n) {
    const c = sql[i] as string;
    const skipped = skippedEnd(sql, i);
    if (skipped > i) {
      i = skipped;
    } else if (c === '?') {
      let j = i + 1;
      while (j < n && DIGIT.test(sql[j] as string)) j++;
      let index: number;
      if (j === i + 1) {
        index = ++count;
      } else {
        index = Number(sql.slice(i + 1, j));
        if (index > count) {
          count = index;
          names.set(index, sql.slice(i, j));
        } else if (!names.has(index)) {
          names.set(index, sql.slice(i, j));
        }
      }
      params.push({ start: i, end: j, index });
      i = j;
    } else if (c === ':' || c === '@' || c === '$' || c === '#') {
      // tokenize.c: identifier characters, `::` and a trailing `(...)` (Tcl variable syntax).
      let j = i + 1;
      let len = 0;
      let ok = true;
      while (j < n) {
        const d = sql[j] as string;
        if (ID_CHAR.test(d)) {
          len++;
          j++;
        } else if (d === '(' && len > 0) {
          while (j < n && sql[j] !== ')' && !/\s/.test(sql[j] as string)) j++;
          if (sql[j] === ')') j++;
          else ok = false;
          break;
        } else if (d === ':' && sql[j + 1] === ':') {
          j += 2;
        } else break;
      }
      if (len > 0 && ok) {
        const name = sql.slice(i, j);
        let index = byName.get(name);
        if (index === undefined) {
          index = ++count;
          byName.set(name, index);
          names.set(index, name);
        }
        params.push({ start: i, end: j, index });
      }
      i = Math.max(j, i + 1);
    } else if (ID_CHAR.test(c)) {
      // A name, keyword or number (a `$` inside one is not a parameter).
      let j = i + 1;
      while (j < n && (ID_CHAR.test(sql[j] as string) || (DIGIT.test(c) && sql[j] === '.'))) j++;
      i = j;
    } else {
      i++;
    }
  }
  return { params, names, count };
}

export type Bindable = null | number | bigint | string | Uint8Array;
export type ArgValue = Bindable | ExactReal;

/** What a statement is run with: its SQL (rewritten when needed) and values the binding binds as meant. */
export interface BoundStatement {
  sql: string;
  args: Bindable[] | Record<string, Bindable>;
  /** Result column names contain `nube_real(...)` wrappers to take out. */
  rewritten: boolean;
}

const scans = new Map<string, ParamMap>();

function scanCached(sql: string): ParamMap {
  let m = scans.get(sql);
  if (!m) {
    m = scanParams(sql);
    scans.set(sql, m);
    if (scans.size > 256) scans.delete(scans.keys().next().value as string);
  }
  return m;
}

/**
 * `sql` with `args` ready for the binding. The indices filled by an ExactReal are found the way the
 * binding fills them (sqlite_impl.cpp, BindParams): a key names a parameter by its full name or
 * without its prefix; positional values go to the parameters without a name, or named `?NNN`, in order.
 */
export function bindExact(sql: string, args: ArgValue[] | Record<string, ArgValue>): BoundStatement {
  const entries = Array.isArray(args) ? args : Object.values(args);
  if (!entries.some((a) => a instanceof ExactReal)) {
    return { sql, args: args as Bindable[] | Record<string, Bindable>, rewritten: false };
  }
  const map = scanCached(sql);
  const targets = new Set<number>();
  let out: Bindable[] | Record<string, Bindable>;
  if (Array.isArray(args)) {
    const anonymous: number[] = [];
    for (let k = 1; k <= map.count; k++) {
      const name = map.names.get(k);
      if (name === undefined || name.startsWith('?')) anonymous.push(k);
    }
    out = args.map((a, i) => {
      if (!(a instanceof ExactReal)) return a;
      const index = anonymous[i];
      if (index !== undefined) targets.add(index);
      return carrier(a.value);
    });
  } else {
    const byFull = new Map<string, number>();
    const byBare = new Map<string, number>();
    for (const [k, name] of map.names) {
      byFull.set(name, k);
      if (!byBare.has(name.slice(1))) byBare.set(name.slice(1), k);
    }
    const rec: Record<string, Bindable> = {};
    for (const [key, a] of Object.entries(args)) {
      if (!(a instanceof ExactReal)) {
        rec[key] = a;
        continue;
      }
      const index = byFull.get(key) ?? byBare.get(key);
      if (index !== undefined) targets.add(index);
      rec[key] = carrier(a.value);
    }
    out = rec;
  }
  if (targets.size === 0) return { sql, args: out, rewritten: false };
  let text = '';
  let at = 0;
  for (const p of map.params) {
    if (!targets.has(p.index)) continue;
    text += `${sql.slice(at, p.start)}${REAL_FUNCTION}(${sql.slice(p.start, p.end)})`;
    at = p.end;
  }
  text += sql.slice(at);
  return { sql: text, args: out, rewritten: true };
}

const WRAPPED = new RegExp(`${REAL_FUNCTION}\\(((?:\\?[0-9]*)|(?:[:@$#][^)\\s]*\\)?))\\)`, 'g');

/** A result column name of a rewritten statement, as it would be without the wrappers. */
export function unwrapName(name: string): string {
  return name.includes(REAL_FUNCTION) ? name.replace(WRAPPED, '$1') : name;
}
