import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { QueryResult, SqlValue } from './schemas.js';

/*
 * sqllogictest parser and runner (the corpus: SQLite's public sqllogictest files, read from SLT_CORPUS_DIR).
 * The runner takes any `exec(sql) => QueryResult` (the engine directly, or HTTP later),
 * so the same records check the JSON encoding end to end. Values are rendered the way
 * the reference SQLite driver renders them (sqlite3_column_int64 / "%.3f" / text).
 */

export type SltRecord =
  | { kind: 'statement'; line: number; expectError: boolean; sql: string }
  | {
      kind: 'query';
      line: number;
      types: string;
      sort: 'nosort' | 'rowsort' | 'valuesort';
      label: string | null;
      sql: string;
      expected: string[] | { count: number; md5: string };
    }
  | { kind: 'hash-threshold'; line: number; value: number }
  | { kind: 'halt'; line: number };

export interface SltFailure {
  file: string;
  line: number;
  sql: string;
  message: string;
}

export interface SltReport {
  passed: number;
  skipped: number;
  failures: SltFailure[];
}

const ENGINE = 'sqlite';

/**
 * Where the sqllogictest corpus is read from: `NUBE_SQLLOGICTEST_DIR`, else the shared test data beside
 * the checkout (`../shared/testdata/sqllogictest`). Its owners ask that it be read in place, not copied
 * into the project, so a clone without it skips the corpus suites (CI, which has it, must find it).
 */
export const SLT_CORPUS_DIR = path.resolve(
  process.env.NUBE_SQLLOGICTEST_DIR ?? path.join(import.meta.dirname, '../../../../../shared/testdata/sqllogictest'),
);

/** Whether the corpus is there; without it the suites skip, except under CI where it must be. */
export const SLT_CORPUS_PRESENT = existsSync(SLT_CORPUS_DIR);
export const SLT_SKIP = !SLT_CORPUS_PRESENT && !process.env.CI;

/** One corpus file as the suites run it: its name, a database name for it, its records. */
export interface SltCase {
  name: string;
  dbName: string;
  records(): SltRecord[];
}

/** Every file of the corpus (engine and HTTP suites run the same list). */
export function sltCorpus(dir = SLT_CORPUS_DIR): SltCase[] {
  if (!existsSync(dir)) return [];
  return sltFiles(dir).map((file) => {
    const name = path.relative(dir, file);
    return { name, dbName: `slt-${name.replace(/[^A-Za-z0-9]/g, '-')}`, records: () => parseSlt(readFileSync(file, 'utf8')) };
  });
}

/** Every `.test` file under `dir` (the corpus nests the evidence files one level down). */
export function sltFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) return sltFiles(p);
    return name.endsWith('.test') ? [p] : [];
  });
}

/** Parses a file into the records that apply to SQLite (skipif/onlyif already applied). */
export function parseSlt(text: string): SltRecord[] {
  const lines = text.split(/\r?\n/);
  const out: SltRecord[] = [];
  let i = 0;
  while (i < lines.length) {
    const start = i;
    const block: string[] = [];
    while (i < lines.length && lines[i].trim() !== '') block.push(lines[i++]);
    while (i < lines.length && lines[i].trim() === '') i++;
    const body = block.filter((l) => !l.startsWith('#'));
    let skip = false;
    while (body.length > 0 && /^(skipif|onlyif) /.test(body[0])) {
      const [cond, engine] = body.shift()!.split(/\s+/);
      if ((cond === 'skipif') === (engine === ENGINE)) skip = true;
    }
    if (body.length === 0 || skip) continue;
    const line = start + 1 + block.indexOf(body[0]);
    const head = body[0].trim().split(/\s+/);
    if (head[0] === 'halt') out.push({ kind: 'halt', line });
    else if (head[0] === 'hash-threshold') out.push({ kind: 'hash-threshold', line, value: Number(head[1]) });
    else if (head[0] === 'statement') {
      out.push({ kind: 'statement', line, expectError: head[1] === 'error', sql: body.slice(1).join('\n') });
    } else if (head[0] === 'query') {
      const sep = body.indexOf('----');
      const sql = body.slice(1, sep < 0 ? undefined : sep).join('\n');
      const res = sep < 0 ? [] : body.slice(sep + 1);
      const hash = res.length === 1 ? /^(\d+) values hashing to ([0-9a-f]{32})$/.exec(res[0].trim()) : null;
      out.push({
        kind: 'query',
        line,
        types: head[1],
        sort: (head[2] ?? 'nosort') as 'nosort' | 'rowsort' | 'valuesort',
        label: head[3] ?? null,
        sql,
        expected: hash ? { count: Number(hash[1]), md5: hash[2] } : res.map((l) => l.trim()),
      });
    } else {
      throw new Error(`line ${line}: unknown record ${body[0]}`);
    }
  }
  return out;
}

/** Runs records in order; `exec` must reject on SQL errors. */
export async function runSlt(
  file: string,
  records: SltRecord[],
  exec: (sql: string) => Promise<QueryResult>,
): Promise<SltReport> {
  const report: SltReport = { passed: 0, skipped: 0, failures: [] };
  const labels = new Map<string, string>();
  for (const rec of records) {
    if (rec.kind === 'halt') break;
    if (rec.kind === 'hash-threshold') continue;
    const fail = (message: string) => report.failures.push({ file, line: rec.line, sql: rec.sql, message });
    let result: QueryResult | null = null;
    let error: unknown = null;
    try {
      result = await exec(rec.sql);
    } catch (err) {
      error = err;
    }
    if (rec.kind === 'statement') {
      if (rec.expectError !== (error !== null)) {
        fail(rec.expectError ? 'expected an error' : `unexpected error: ${(error as Error).message}`);
      } else report.passed++;
      continue;
    }
    // The reference SQLite driver stops at a failing sqlite3_step and reports the rows it
    // got (none), so an error is an empty result that only an empty expectation matches.
    const values = result === null ? [] : renderValues(rec.types, rec.sort, result);
    const why = error === null ? '' : ` (query failed: ${(error as Error).message})`;
    const md5 = createHash('md5')
      .update(values.map((v) => `${v}\n`).join(''))
      .digest('hex');
    const exp = rec.expected;
    let ok: boolean;
    if (Array.isArray(exp)) {
      const flat = exp.length === values.length ? exp : exp.flatMap((l) => l.split(/\s+/));
      ok = flat.length === values.length && flat.every((v, i) => v === values[i]);
      if (!ok) fail(`expected ${JSON.stringify(exp)}, got ${JSON.stringify(values)}${why}`);
    } else {
      ok = exp.count === values.length && exp.md5 === md5;
      if (!ok)
        fail(`expected ${exp.count} values hashing to ${exp.md5}, got ${values.length} (${md5})${why}`);
    }
    if (ok && rec.label !== null) {
      const seen = labels.get(rec.label);
      if (seen !== undefined && seen !== md5) {
        fail(`label ${rec.label} differs from an earlier query with the same label`);
        ok = false;
      } else labels.set(rec.label, md5);
    }
    if (ok) report.passed++;
  }
  return report;
}

function renderValues(types: string, sort: string, result: QueryResult): string[] {
  const rows = result.rows.map((row) => row.map((v, i) => render(v, types[i] ?? 'T')));
  if (sort === 'rowsort') rows.sort((a, b) => compareRows(a, b));
  const values = rows.flat();
  if (sort === 'valuesort') values.sort(cmp);
  return values;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function compareRows(a: string[], b: string[]): number {
  for (let i = 0; i < a.length; i++) {
    const c = cmp(a[i], b[i]);
    if (c !== 0) return c;
  }
  return 0;
}

/** One value as the reference driver prints it for column type I, R or T. */
export function render(v: SqlValue, type: string): string {
  if (v === null) return 'NULL';
  if (type === 'I') return toInt64(v).toString();
  if (type === 'R') return fixed3(toReal(v));
  const text = toText(v);
  if (text === '') return '(empty)';
  return text.replace(/[^\x20-\x7e]/g, '@');
}

function toText(v: Exclude<SqlValue, null>): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return Number.isInteger(v) ? v.toString() : realText(v);
  if ('integer' in v) return v.integer;
  if ('base64' in v) return Buffer.from(v.base64, 'base64').toString('latin1');
  return v.real === 'Infinity' ? 'Inf' : v.real === '-Infinity' ? '-Inf' : realText(Number(v.real));
}

/** SQLite's "%.3f": at most 16 significant digits, zeros after them. */
function fixed3(x: number): string {
  if (!Number.isFinite(x) || Math.abs(x) < 1e13) return x.toFixed(3);
  const [mant, expPart] = Math.abs(x).toPrecision(16).split('e');
  const exp = Number(expPart ?? 0);
  const [intPart, frac = ''] = mant.split('.');
  const digits = intPart + frac;
  const intLen = intPart.length + exp;
  const whole = digits.padEnd(Math.max(intLen, digits.length), '0');
  const fraction = `${whole.slice(intLen)}000`.slice(0, 3);
  return `${x < 0 ? '-' : ''}${whole.slice(0, intLen)}.${fraction}`;
}

/** SQLite prints REAL with %!.15g. */
function realText(x: number): string {
  const s = Number(x.toPrecision(15)).toString();
  return /[.e]/.test(s) ? s : `${s}.0`;
}

function toInt64(v: Exclude<SqlValue, null>): bigint {
  if (typeof v === 'number') return BigInt(Math.trunc(v));
  if (typeof v === 'string') return textToInt(v);
  if ('integer' in v) return BigInt(v.integer);
  if ('base64' in v) return textToInt(Buffer.from(v.base64, 'base64').toString('latin1'));
  return v.real === 'Infinity' ? 9223372036854775807n : -9223372036854775808n;
}

function textToInt(s: string): bigint {
  const m = /^\s*([+-]?\d+)/.exec(s);
  return m ? BigInt(m[1]) : 0n;
}

function toReal(v: Exclude<SqlValue, null>): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string') return Number.parseFloat(v.trim()) || 0;
  if ('integer' in v) return Number(v.integer);
  if ('base64' in v) return Number.parseFloat(Buffer.from(v.base64, 'base64').toString('latin1')) || 0;
  return Number(v.real);
}
