import { createClient } from '@libsql/client';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// REAL arguments go in and come out bit for bit as REAL on every path (/query single, batch and
// import; Hrana execute, batch and streams, raw and through @libsql/client), compared with SQLite
// called in this process (better-sqlite3 binds every JS number with sqlite3_bind_double).

const VALUES = [
  5e-324,
  -5e-324,
  Number.MIN_VALUE,
  1e-17,
  Number.EPSILON / 2,
  2 ** -1022,
  2.225073858507201e-308,
  0,
  -0,
  3,
  -3,
  1,
  2147483647,
  -2147483648,
  2147483648,
  Number.MAX_SAFE_INTEGER,
  Number.MAX_VALUE,
  -Number.MAX_VALUE,
  1.5,
  0.1,
  -2.5e-300,
];

/** Columns of every affinity: how each stores a REAL is SQLite's business, the same in both. */
const TABLE = 'CREATE TABLE r (k INTEGER PRIMARY KEY, a REAL, n NUMERIC, i INTEGER, t TEXT, b BLOB, x)';
const INSERT = 'INSERT INTO r (k, a, n, i, t, b, x) VALUES (?1, ?2, ?2, ?2, ?2, ?2, ?2)';
const SELECT_ROW =
  'SELECT typeof(a), a, typeof(n), n, typeof(i), i, typeof(t), t, typeof(b), b, typeof(x), x FROM r WHERE k = ?';

type Cell = string | null;

/** A value as type and exact bits, so 0 and -0 (and every NaN-free double) compare exactly. */
function cell(v: unknown): Cell {
  if (v === null) return null;
  if (typeof v === 'number') {
    const b = Buffer.alloc(8);
    b.writeDoubleLE(v);
    return `f:${b.toString('hex')}`;
  }
  if (typeof v === 'bigint') return `i:${v}`;
  if (typeof v === 'string') return `s:${v}`;
  return `?:${JSON.stringify(v)}`;
}

/** nube's /query value encoding -> cell (INTEGER and REAL are told apart by the typeof() beside them). */
function fromNube(v: unknown, type: string): Cell {
  if (v !== null && typeof v === 'object' && 'real' in v) {
    const r = (v as { real: string }).real;
    return cell(r === '-0' ? -0 : Number(r));
  }
  if (v !== null && typeof v === 'object' && 'integer' in v) return `i:${(v as { integer: string }).integer}`;
  if (typeof v === 'number' && type === 'integer') return `i:${v}`;
  return cell(v);
}

/** Hrana Value -> cell. */
function fromHrana(v: { type: string; value?: unknown }): Cell {
  if (v.type === 'null') return null;
  if (v.type === 'integer') return `i:${v.value}`;
  if (v.type === 'float') return cell(v.value);
  return cell(v.value);
}

function reference(values = VALUES): { select: (k: number) => Cell[]; typeOf: (v: number) => Cell[] } {
  const db = new Database(':memory:');
  db.exec(TABLE);
  // better-sqlite3 binds ?NNN by name only: plain ? here, each value given as often as it is used.
  const ins = db.prepare('INSERT INTO r (k, a, n, i, t, b, x) VALUES (?, ?, ?, ?, ?, ?, ?)');
  for (const [k, v] of values.entries()) ins.run(k, v, v, v, v, v, v);
  const sel = db.prepare(SELECT_ROW).raw().safeIntegers();
  const typeOf = db.prepare('SELECT typeof(?), ?').raw().safeIntegers();
  return {
    select: (k) => (sel.get(k) as unknown[]).map(cell),
    typeOf: (v) => (typeOf.get(v, v) as unknown[]).map(cell),
  };
}

/** Row cells as /query returns them: [typeof, value, typeof, value, ...]. */
function nubeRow(row: unknown[]): Cell[] {
  return row.map((v, i) => (i % 2 === 0 ? cell(v) : fromNube(v, row[i - 1] as string)));
}

describe.each(DIALECTS)('REAL values bit for bit (%s)', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let ref: ReturnType<typeof reference>;
  let n = 0;

  beforeAll(async () => {
    t = await startNube({ dialect });
    call = caller(t);
    ref = reference();
  });
  afterAll(() => t?.close());

  const newDb = async () => {
    const db = await json(await call('POST', '/databases', { name: `reals-${n++}` }));
    await query(db.id, { sql: TABLE });
    return db as { id: string; libsqlUrl: string };
  };
  const query = async (id: string, body: unknown) => {
    const r = await call('POST', `/databases/${id}/query`, body);
    const b = await json(r);
    expect(r.status, JSON.stringify(b)).toBe(200);
    return b;
  };
  const checkRows = async (id: string) => {
    for (let k = 0; k < VALUES.length; k++) {
      const r = await query(id, { sql: SELECT_ROW, args: [k] });
      expect(nubeRow(r.rows[0]), `value ${VALUES[k]}`).toEqual(ref.select(k));
    }
  };
  const wire = (v: number) => (Object.is(v, -0) ? { real: '-0' } : { real: v });

  it('/query: typeof(?) and the value, positional, numbered and named', async () => {
    const db = await newDb();
    for (const v of VALUES) {
      const expected = ref.typeOf(v);
      const pos = await query(db.id, { sql: 'SELECT typeof(?1), ?1', args: [wire(v)] });
      expect(nubeRow(pos.rows[0]), `value ${v}`).toEqual(expected);
      const named = await query(db.id, { sql: 'SELECT typeof(:v), :v', args: { v: wire(v) } });
      expect(nubeRow(named.rows[0]), `value ${v}`).toEqual(expected);
      const anon = await query(db.id, { sql: 'SELECT typeof(?), ?', args: [wire(v), wire(v)] });
      expect(nubeRow(anon.rows[0]), `value ${v}`).toEqual(expected);
      // Column names are the client's SQL, whatever the engine did to bind the value.
      expect(anon.columns).toEqual(['typeof(?)', '?']);
    }
    // A plain JSON number with a fraction is a REAL, however close to 0.
    const tiny = await query(db.id, { sql: 'SELECT typeof(?), ?', args: [5e-324, 1e-17] });
    expect(tiny.rows[0]).toEqual(['real', 1e-17]);
  });

  it('/query single statements, a batch and an import store the same as SQLite', async () => {
    const single = await newDb();
    for (const [k, v] of VALUES.entries()) await query(single.id, { sql: INSERT, args: [k, wire(v)] });
    await checkRows(single.id);

    const batch = await newDb();
    await query(batch.id, {
      statements: VALUES.slice(0, 20).map((v, k) => ({ sql: INSERT, args: [k, wire(v)] })),
    });
    await query(batch.id, {
      statements: VALUES.slice(20).map((v, i) => ({ sql: INSERT, args: [i + 20, wire(v)] })),
    });
    await checkRows(batch.id);

    const imp = await newDb();
    const r = await query(imp.id, {
      table: 'r',
      columns: ['k', 'a', 'n', 'i', 't', 'b', 'x'],
      rows: VALUES.map((v, k) => [k, wire(v), wire(v), wire(v), wire(v), wire(v), wire(v)]),
    });
    expect(r.imported).toBe(VALUES.length);
    await checkRows(imp.id);
  });

  it('Hrana pipeline: execute, batch and a stream over its baton, raw JSON', async () => {
    const db = await newDb();
    const pipeline = async (body: unknown) => {
      const r = await fetch(`${db.libsqlUrl}v2/pipeline`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
        // -0 as the JSON number -0 (JSON.stringify would print 0).
        body: JSON.stringify(body, (_k, v) => (Object.is(v, -0) ? 'NEGZERO' : v)).replaceAll(
          '"NEGZERO"',
          '-0',
        ),
      });
      expect(r.status).toBe(200);
      // Parsed from the text: -0 must be on the wire as -0.
      return JSON.parse(await r.text());
    };
    const float = (v: number) => ({ type: 'float', value: v });
    const int = (k: number) => ({ type: 'integer', value: String(k) });
    const half = Math.ceil(VALUES.length / 2);
    // The first half through execute requests in a stream (two requests, one baton), the rest in a batch.
    const opened = await pipeline({
      baton: null,
      requests: VALUES.slice(0, 5).map((v, k) => ({
        type: 'execute',
        stmt: { sql: INSERT, args: [int(k), float(v)] },
      })),
    });
    expect(opened.results.every((x: { type: string }) => x.type === 'ok')).toBe(true);
    const closed = await pipeline({
      baton: opened.baton,
      requests: [
        ...VALUES.slice(5, half).map((v, i) => ({
          type: 'execute',
          stmt: {
            sql: 'INSERT INTO r (k, a, n, i, t, b, x) VALUES (:k, :v, :v, :v, :v, :v, :v)',
            named_args: [
              { name: ':k', value: int(i + 5) },
              { name: ':v', value: float(v) },
            ],
          },
        })),
        { type: 'close' },
      ],
    });
    expect(closed.results.every((x: { type: string }) => x.type === 'ok')).toBe(true);
    const batch = await pipeline({
      baton: null,
      requests: [
        {
          type: 'batch',
          batch: {
            steps: VALUES.slice(half).map((v, i) => ({
              stmt: { sql: INSERT, args: [int(i + half), float(v)] },
            })),
          },
        },
        { type: 'close' },
      ],
    });
    expect(batch.results[0].response.result.step_errors.every((e: unknown) => e === null)).toBe(true);

    const read = await pipeline({
      baton: null,
      requests: [
        ...VALUES.map((_, k) => ({ type: 'execute', stmt: { sql: SELECT_ROW, args: [int(k)] } })),
        ...VALUES.map((v) => ({ type: 'execute', stmt: { sql: 'SELECT typeof(?1), ?1', args: [float(v)] } })),
        { type: 'close' },
      ],
    });
    VALUES.forEach((v, k) => {
      expect(read.results[k].response.result.rows[0].map(fromHrana), `value ${v}`).toEqual(ref.select(k));
      const typed = read.results[VALUES.length + k].response.result;
      expect(typed.rows[0].map(fromHrana), `value ${v}`).toEqual(ref.typeOf(v));
    });
  });

  it('@libsql/client: execute, batch and a transaction', async () => {
    // The client writes a float with "" + value, which prints -0 as 0: it cannot send -0.
    const sendable = VALUES.map((v) => (Object.is(v, -0) ? 0 : v));
    const ref = reference(sendable);
    const db = await newDb();
    const c = createClient({ url: db.libsqlUrl, authToken: t.ownerKey, intMode: 'bigint' });
    try {
      const third = Math.ceil(VALUES.length / 3);
      for (const [k, v] of sendable.slice(0, third).entries())
        await c.execute({ sql: INSERT, args: [BigInt(k), v] });
      await c.batch(
        sendable.slice(third, 2 * third).map((v, i) => ({ sql: INSERT, args: [BigInt(i + third), v] })),
        'write',
      );
      const tx = await c.transaction('write');
      for (const [i, v] of sendable.slice(2 * third).entries())
        await tx.execute({ sql: INSERT, args: [BigInt(i + 2 * third), v] });
      await tx.commit();
      for (const [k, v] of sendable.entries()) {
        const r = await c.execute({ sql: SELECT_ROW, args: [BigInt(k)] });
        const row = r.rows[0] as unknown as unknown[];
        expect(
          Array.from({ length: 12 }, (_, i) => cell(row[i])),
          `value ${v}`,
        ).toEqual(ref.select(k));
        const typed = await c.execute({ sql: 'SELECT typeof(?1), ?1', args: [v] });
        const trow = typed.rows[0] as unknown as unknown[];
        expect([cell(trow[0]), cell(trow[1])], `value ${v}`).toEqual(ref.typeOf(v));
      }
    } finally {
      c.close();
    }
  });
});
