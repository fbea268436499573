import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// Read-your-writes across executors, connections and cached statements: random DDL (tables,
// indexes, views and triggers dropped and re-created under the same names, ALTER), DML and SELECT
// on several databases at once, each statement sent once the previous one was answered, through
// /query, one-shot Hrana pipelines and Hrana streams (connections of their own), with executors
// shared between the databases so a database's requests move from one executor to another. Every
// answer is compared with one SQLite connection in this process running the same statements.
//
// CI size by default; for a long run by hand: NUBE_SCHEMA_STRESS_MS=3600000 (runs that long) or
// NUBE_SCHEMA_STRESS_STATEMENTS=<per database>, and NUBE_SCHEMA_STRESS_SEED to replay a run.

const DURATION_MS = Number(process.env.NUBE_SCHEMA_STRESS_MS ?? 0);
const PER_DATABASE = Number(process.env.NUBE_SCHEMA_STRESS_STATEMENTS ?? 500);
const DATABASES = 4;
const SEED = Number(process.env.NUBE_SCHEMA_STRESS_SEED ?? Date.now() % 1_000_000);

/** mulberry32: a small seeded generator, so a failing run can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Random statements over a few reused names; many fail, and must fail the same way on both sides. */
function generator(random: () => number): () => string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
  const int = (n: number) => Math.floor(random() * n);
  const table = () => `t${int(3)}`;
  const col = () => `c${int(4)}`;
  const value = () => pick([`${int(20)}`, `'s${int(10)}'`, `${int(100) / 4}`, 'NULL', `x'0${int(10)}'`]);
  const cols = () => {
    const n = 1 + int(3);
    return [...new Set(Array.from({ length: n }, col))];
  };
  const statements: (() => string)[] = [
    () =>
      `CREATE TABLE ${pick(['', 'IF NOT EXISTS '])}${table()} (c0 ${pick(['INTEGER', 'TEXT', 'REAL', ''])}, c1 ${pick(['INTEGER', 'TEXT', 'NUMERIC', ''])}${pick(['', ', c2', ', c2 UNIQUE', ', c2 NOT NULL DEFAULT 0'])})`,
    () => `DROP TABLE ${pick(['', 'IF EXISTS '])}${table()}`,
    () =>
      `CREATE ${pick(['', 'UNIQUE '])}INDEX ${pick(['', 'IF NOT EXISTS '])}idx_${table()}_${int(2)} ON ${table()} (${cols().join(', ')})`,
    () => `DROP INDEX ${pick(['', 'IF EXISTS '])}idx_${table()}_${int(2)}`,
    () => `ALTER TABLE ${table()} ADD COLUMN ${pick(['c2', 'c3'])} ${pick(['INTEGER', 'TEXT', ''])}`,
    () => `ALTER TABLE ${table()} RENAME COLUMN ${col()} TO ${col()}`,
    () => `ALTER TABLE ${table()} RENAME TO ${table()}`,
    () => `ALTER TABLE ${table()} DROP COLUMN ${col()}`,
    () =>
      `CREATE VIEW ${pick(['', 'IF NOT EXISTS '])}v${int(2)} AS SELECT ${cols().join(', ')} FROM ${table()}`,
    () => `DROP VIEW ${pick(['', 'IF EXISTS '])}v${int(2)}`,
    () =>
      `CREATE TRIGGER ${pick(['', 'IF NOT EXISTS '])}tr${int(2)} AFTER ${pick(['INSERT', 'DELETE'])} ON ${table()} BEGIN INSERT INTO ${table()} (c0) VALUES (${value()}); END`,
    () => `DROP TRIGGER ${pick(['', 'IF EXISTS '])}tr${int(2)}`,
    () => {
      const cs = cols();
      return `INSERT ${pick(['', 'OR REPLACE ', 'OR IGNORE '])}INTO ${table()} (${cs.join(', ')}) VALUES (${cs.map(value).join(', ')})`;
    },
    () => `INSERT INTO ${table()} SELECT * FROM ${table()} LIMIT 3`,
    () =>
      `UPDATE ${table()} SET ${col()} = ${value()} WHERE ${col()} ${pick(['IS NULL', '> 5', `= ${value()}`])}`,
    () => `DELETE FROM ${table()} WHERE ${col()} ${pick(['IS NOT NULL', '< 10', `= ${value()}`])}`,
    () => `SELECT * FROM ${table()}`,
    () => `SELECT ${cols().join(', ')} FROM ${table()} WHERE ${col()} ${pick(['IS NOT NULL', '> 3'])}`,
    () => `SELECT count(*), max(${col()}) FROM ${table()}`,
    () => `SELECT * FROM v${int(2)}`,
    () => 'SELECT type, name, tbl_name, sql FROM sqlite_schema',
    () => `SELECT name, type, "notnull", pk FROM pragma_table_info('${table()}')`,
    () => `SELECT name, "unique" FROM pragma_index_list('${table()}')`,
  ];
  // DDL about as often as reads and writes: the point is statements right after schema changes.
  return () => pick(statements)();
}

type Outcome = { ok: true; rows: string[] } | { ok: false; message: string };

/** A value as a canonical string: numbers by value (/query cannot tell 2 from 2.0; typeof() can). */
function canon(v: unknown): string {
  if (v === null || v === undefined) return 'N';
  if (typeof v === 'bigint' || typeof v === 'number') return `n:${Number(v)}`;
  if (typeof v === 'string') return `t:${v}`;
  if (v instanceof Uint8Array) return `b:${Buffer.from(v).toString('hex')}`;
  const o = v as Record<string, unknown>;
  if ('base64' in o) return `b:${Buffer.from(o.base64 as string, 'base64').toString('hex')}`;
  if ('integer' in o) return `n:${Number(o.integer)}`;
  if ('real' in o) return `n:${Number(o.real)}`;
  if ('type' in o) {
    if (o.type === 'null') return 'N';
    if (o.type === 'integer' || o.type === 'float') return `n:${Number(o.value)}`;
    if (o.type === 'text') return `t:${o.value}`;
    if (o.type === 'blob') return `b:${Buffer.from(o.base64 as string, 'base64').toString('hex')}`;
  }
  return `?:${JSON.stringify(v)}`;
}

/** Rows as a sorted list (no statement here orders its rows): the same multiset either way. */
function rowsOf(rows: unknown[][]): string[] {
  return rows.map((r) => r.map(canon).join('|')).sort();
}

function reference(db: Database.Database, sql: string): Outcome {
  try {
    const stmt = db.prepare(sql);
    if (!stmt.reader) {
      stmt.run();
      return { ok: true, rows: [] };
    }
    return { ok: true, rows: rowsOf(stmt.raw().safeIntegers().all() as unknown[][]) };
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
}

describe.each(DIALECTS)(
  'schema and data seen fresh by every executor, in lockstep with SQLite (%s)',
  (dialect) => {
    let t: TestNube;
    let call: ReturnType<typeof caller>;

    beforeAll(async () => {
      // Four executors, all of them usable by the one account: a database's requests hop between them.
      t = await startNube({
        dialect,
        env: {
          NUBE_DATABASE_EXECUTORS_MIN: '4',
          NUBE_DATABASE_EXECUTORS_MAX: '6',
          NUBE_DATABASE_EXECUTORS_PER_OWNER: '4',
          NUBE_LIBSQL_STREAMS_PER_OWNER: '20',
        },
      });
      call = caller(t);
    });
    afterAll(() => t?.close());

    it('a statement compiled right after another connection changed the schema sees the change', async () => {
      const db = await json(await call('POST', '/databases', { name: 'stale' }));
      const query = async (sql: string) => {
        const r = await call('POST', `/databases/${db.id}/query`, { sql });
        return { status: r.status, body: await json(r) };
      };
      expect((await query('CREATE TABLE t2 (a); CREATE UNIQUE INDEX idx_t2_0 ON t2 (a)')).status).toBe(200);
      expect((await query('SELECT * FROM t2')).status).toBe(200);
      // Another connection (a libSQL stream has its own) drops the table and creates it again.
      const r = await fetch(`${db.libsqlUrl}v2/pipeline`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          baton: null,
          requests: [
            { type: 'execute', stmt: { sql: 'DROP TABLE t2' } },
            { type: 'execute', stmt: { sql: 'CREATE TABLE t2 (b)' } },
          ],
        }),
      });
      const opened = await json(r);
      expect(opened.results.map((x: { type: string }) => x.type)).toEqual(['ok', 'ok']);
      await fetch(`${db.libsqlUrl}v2/pipeline`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ baton: opened.baton, requests: [{ type: 'close' }] }),
      });
      // The index name is free again: the shared connection must not answer from its old schema.
      const created = await query('CREATE UNIQUE INDEX idx_t2_0 ON t2 (b)');
      expect(created.body).toMatchObject({ rowsAffected: 0 });
      expect(created.status).toBe(200);
    });

    it(`compares every answer (seed ${SEED})`, {
      timeout: Math.max(110_000, DURATION_MS + 120_000),
    }, async () => {
      const started = Date.now();
      let compared = 0;
      let succeeded = 0;
      const mismatches: string[] = [];

      const drive = async (d: number) => {
        const created = await json(await call('POST', '/databases', { name: `stress-${d}` }));
        const url = `${created.libsqlUrl}v2/pipeline`;
        const ref = new Database(':memory:');
        const random = rng(SEED * 31 + d);
        const next = generator(random);
        let baton: string | null = null;
        let streamLeft = 0;

        const hrana = async (requests: unknown[], b: string | null) => {
          const r = await fetch(url, {
            method: 'POST',
            headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ baton: b, requests }),
          });
          const body = await json(r);
          if (r.status !== 200) throw new Error(`pipeline answered ${r.status}: ${JSON.stringify(body)}`);
          return body;
        };
        const viaQuery = async (sql: string): Promise<Outcome> => {
          const r = await call('POST', `/databases/${created.id}/query`, { sql });
          const body = await json(r);
          if (r.status === 200) return { ok: true, rows: rowsOf(body.rows) };
          if (r.status !== 400 || !/^SQLITE_/.test(body.code))
            throw new Error(`/query answered ${r.status}: ${JSON.stringify(body)}`);
          return { ok: false, message: body.error };
        };
        const fromHrana = (res: {
          type: string;
          response?: { result: { rows: unknown[][] } };
          error?: { message: string };
        }): Outcome =>
          res.type === 'ok'
            ? { ok: true, rows: rowsOf(res.response?.result.rows ?? []) }
            : { ok: false, message: res.error?.message ?? '' };
        const viaPipeline = async (sql: string): Promise<Outcome> => {
          const body = await hrana([{ type: 'execute', stmt: { sql } }, { type: 'close' }], null);
          return fromHrana(body.results[0]);
        };
        // A stream keeps a connection of its own for a few statements, then closes.
        const viaStream = async (sql: string): Promise<Outcome> => {
          if (streamLeft === 0) streamLeft = 1 + Math.floor(random() * 8);
          streamLeft--;
          const closing = streamLeft === 0;
          const body = await hrana(
            [{ type: 'execute', stmt: { sql } }, ...(closing ? [{ type: 'close' }] : [])],
            baton,
          );
          baton = closing ? null : body.baton;
          return fromHrana(body.results[0]);
        };

        for (let i = 0; DURATION_MS > 0 ? Date.now() - started < DURATION_MS : i < PER_DATABASE; i++) {
          const sql = next();
          const path = streamLeft > 0 ? 2 : Math.floor(random() * 3);
          const got = await [viaQuery, viaPipeline, viaStream][path]?.(sql);
          const want = reference(ref, sql);
          compared++;
          if (want.ok) succeeded++;
          if (JSON.stringify(got) !== JSON.stringify(want)) {
            mismatches.push(
              `db ${d} #${i} via ${['query', 'pipeline', 'stream'][path]}: ${sql}\n  nube: ${JSON.stringify(got)}\n  sqlite: ${JSON.stringify(want)}`,
            );
            if (mismatches.length >= 5) break;
          }
        }
        if (baton) await hrana([{ type: 'close' }], baton);
        ref.close();
      };

      await Promise.all(Array.from({ length: DATABASES }, (_, d) => drive(d)));
      console.log(
        `schema stress (${dialect}, seed ${SEED}): ${compared} statements compared (${succeeded} succeeded) in ${Date.now() - started} ms`,
      );
      expect(mismatches).toEqual([]);
      expect(compared).toBeGreaterThanOrEqual(DURATION_MS > 0 ? 1 : DATABASES * PER_DATABASE);
      expect(succeeded).toBeGreaterThan(compared / 3);
    });
  },
);
