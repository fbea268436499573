import { DatabaseSync } from '@photostructure/sqlite';
import { describe, expect, it } from 'vitest';
import {
  type ArgValue,
  bindExact,
  decodeReal,
  ExactReal,
  REAL_FUNCTION,
  realArg,
  unwrapName,
} from './exact-reals.js';

// The rewriting must send each REAL to the placeholder the binding would have sent it to. Reference:
// the same SQL bound with values the binding keeps as doubles (k + 0.5); rewritten with integral
// REALs (k), every placeholder must read REAL k where the reference reads k + 0.5.

const db = new DatabaseSync(':memory:');
db.function(REAL_FUNCTION, { deterministic: true, directOnly: true }, decodeReal);

function run(sql: string, args: unknown[] | Record<string, unknown>): unknown[] {
  const stmt = db.prepare(sql);
  stmt.setReturnArrays(true);
  return (Array.isArray(args) ? stmt.get(...(args as never[])) : stmt.get(args as never)) as unknown[];
}

const CASES: { sql: string; args: number | string[] }[] = [
  { sql: 'SELECT ?, ?, ?', args: 3 },
  { sql: 'SELECT ?2, ?1, ?2, ?', args: 3 },
  { sql: "SELECT '?', ?, 'it''s ?', /* ? */ ? -- ?\n, ?", args: 3 },
  { sql: 'SELECT ?5, ?', args: 6 },
  { sql: 'SELECT :a, ?, :a, ?, @b, $c', args: ['a', 'b', 'c'] },
  { sql: 'SELECT :a, @b, :a', args: [':a', 'b'] },
  { sql: 'SELECT $x::y(z), $x::y(z)', args: ['$x::y(z)'] },
  { sql: 'SELECT a$b FROM (SELECT ? AS a$b)', args: 1 },
  { sql: 'SELECT [?], `?`, ? FROM (SELECT 1 AS "?", 2 AS "x")', args: 1 },
  { sql: "SELECT 1.5e3, x'3f', ?", args: 1 },
];

describe('exact REAL arguments', () => {
  it('binds only what the binding would make an INTEGER, as the bytes of the double', () => {
    expect(realArg(1.5)).toBe(1.5);
    expect(realArg(3)).toBeInstanceOf(ExactReal);
    expect(realArg(-0)).toBeInstanceOf(ExactReal);
    expect(realArg(5e-324)).toBeInstanceOf(ExactReal);
    expect(realArg(-5e-324)).toBe(-5e-324);
    expect(realArg(2 ** 31)).toBe(2 ** 31);
    expect(bindExact('SELECT ?', [1.5])).toEqual({ sql: 'SELECT ?', args: [1.5], rewritten: false });
  });

  it.each(CASES)('fills the placeholders the binding fills: $sql', ({ sql, args }) => {
    const named = typeof args !== 'number';
    const keys = named ? args : Array.from({ length: args }, (_, i) => i);
    const plain = (k: number) => k + 1.5;
    const refArgs = named
      ? Object.fromEntries(args.map((n, k) => [n, plain(k)]))
      : keys.map((_, k) => plain(k));
    const expected = run(sql, refArgs);
    const exact: ArgValue[] | Record<string, ArgValue> = named
      ? Object.fromEntries(args.map((n, k) => [n, new ExactReal(k + 1)]))
      : keys.map((_, k) => new ExactReal(k + 1));
    const bound = bindExact(sql, exact);
    expect(bound.rewritten).toBe(true);
    const got = run(bound.sql, bound.args);
    expect(got).toEqual(expected.map((v) => (typeof v === 'number' && v % 1 === 0.5 ? v - 0.5 : v)));
  });

  it('keeps -0, subnormals and the largest doubles bit for bit', () => {
    for (const v of [-0, 0, 5e-324, 1e-17, 3, -2147483648, 2147483647]) {
      const bound = bindExact('SELECT typeof(?1), ?1', [new ExactReal(v)]);
      const [type, got] = run(bound.sql, bound.args);
      expect(type).toBe('real');
      expect(Object.is(got, v)).toBe(true);
    }
  });

  it('gives result columns their names without the wrapper, and refuses a bad carrier', () => {
    expect(unwrapName(`${REAL_FUNCTION}(?) + ${REAL_FUNCTION}(:a)`)).toBe('? + :a');
    expect(unwrapName(`count(${REAL_FUNCTION}(?3))`)).toBe('count(?3)');
    expect(() => run(`SELECT ${REAL_FUNCTION}(x'00')`, [])).toThrow(/8 bytes/);
  });
});
