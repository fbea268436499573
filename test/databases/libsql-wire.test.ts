import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// Hrana over HTTP at the wire: what @libsql/client does not exercise by itself (v3 pipeline,
// get_autocommit, stored SQL, baton reuse, requests after close, bad bodies).
describe.each(DIALECTS)('libSQL Hrana wire (%s)', (dialect) => {
  let t: TestNube;
  let url: string;

  beforeAll(async () => {
    t = await startNube({ dialect });
    const db = await json(await caller(t)('POST', '/databases', { name: 'wire' }));
    url = db.libsqlUrl;
  });
  afterAll(() => t?.close());

  const pipeline = async (body: unknown, version = 'v2') => {
    const r = await fetch(`${url}${version}/pipeline`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: r.status, type: r.headers.get('content-type'), body: await json(r) };
  };

  it('answers the v2 probe and runs a v3 JSON pipeline with get_autocommit and stored SQL', async () => {
    expect((await fetch(`${url}v2`)).status).toBe(200);
    const first = await pipeline(
      {
        baton: null,
        requests: [
          { type: 'store_sql', sql_id: 1, sql: 'SELECT ?1 + 1 AS n' },
          { type: 'get_autocommit' },
          { type: 'execute', stmt: { sql: 'BEGIN' } },
          { type: 'get_autocommit' },
          { type: 'execute', stmt: { sql_id: 1, args: [{ type: 'integer', value: '41' }], want_rows: true } },
          { type: 'execute', stmt: { sql_id: 2 } },
        ],
      },
      'v3',
    );
    expect(first.status).toBe(200);
    const r = first.body.results;
    expect(r[1].response).toEqual({ type: 'get_autocommit', is_autocommit: true });
    expect(r[3].response).toEqual({ type: 'get_autocommit', is_autocommit: false });
    expect(r[4].response.result.rows).toEqual([[{ type: 'integer', value: '42' }]]);
    expect(r[4].response.result.cols).toEqual([{ name: 'n', decltype: null }]);
    expect(r[5]).toMatchObject({ type: 'error', error: { code: 'SQL_NOT_FOUND' } });
    expect(first.body.baton).toMatch(/^hb_/);

    const second = await pipeline({
      baton: first.body.baton,
      requests: [
        { type: 'close_sql', sql_id: 1 },
        { type: 'execute', stmt: { sql: 'ROLLBACK' } },
        { type: 'close' },
        { type: 'get_autocommit' },
      ],
    });
    expect(second.body.baton).toBeNull();
    expect(second.body.results[1].type).toBe('ok');
    expect(second.body.results[3]).toMatchObject({ type: 'error', error: { code: 'STREAM_CLOSED' } });
    // A baton is good for one request.
    const replay = await pipeline({ baton: first.body.baton, requests: [{ type: 'get_autocommit' }] });
    expect(replay.status).toBe(400);
    expect(replay.type).toBe('application/json');
    expect(replay.body).toMatchObject({ code: 'STREAM_NOT_FOUND' });
    expect(replay.body.message).toMatch(/baton/);
  });

  it('reports batch steps one by one, with conditions', async () => {
    const r = await pipeline({
      baton: null,
      requests: [
        {
          type: 'batch',
          batch: {
            steps: [
              { stmt: { sql: 'SELECT 1' } },
              { stmt: { sql: 'SELECT nope' } },
              { condition: { type: 'ok', step: 1 }, stmt: { sql: 'SELECT 3' } },
              {
                condition: { type: 'error', step: 1 },
                stmt: { sql: "SELECT x'00ff' AS b, 1.5 AS f, NULL AS n" },
              },
              {
                condition: {
                  type: 'and',
                  conds: [{ type: 'not', cond: { type: 'ok', step: 2 } }, { type: 'is_autocommit' }],
                },
                stmt: { sql: 'SELECT 5' },
              },
            ],
          },
        },
        { type: 'close' },
      ],
    });
    const b = r.body.results[0].response.result;
    expect(b.step_results[0].rows).toEqual([[{ type: 'integer', value: '1' }]]);
    expect(b.step_results[1]).toBeNull();
    expect(b.step_errors[1]).toMatchObject({
      code: 'SQLITE_ERROR',
      message: expect.stringMatching(/no such column: nope/),
    });
    expect(b.step_results[2]).toBeNull();
    expect(b.step_errors[2]).toBeNull();
    expect(b.step_results[3].rows).toEqual([
      [{ type: 'blob', base64: 'AP8=' }, { type: 'float', value: 1.5 }, { type: 'null' }],
    ]);
    expect(b.step_results[4].rows).toEqual([[{ type: 'integer', value: '5' }]]);
    expect(r.body.baton).toBeNull();
  });

  it('errors carry the primary code as libSQL sends it, and the extended one beside it', async () => {
    const setup = await pipeline({
      baton: null,
      requests: [
        {
          type: 'sequence',
          sql: `CREATE TABLE ck (id INTEGER PRIMARY KEY, u TEXT UNIQUE, nn TEXT NOT NULL DEFAULT 'x', c INTEGER CHECK (c > 0), p INTEGER REFERENCES ck(id));
                CREATE TABLE st (i INTEGER) STRICT; CREATE TABLE wr (a PRIMARY KEY) WITHOUT ROWID;
                INSERT INTO ck (id, u) VALUES (1, 'a'); INSERT INTO wr VALUES (1);`,
        },
        { type: 'close' },
      ],
    });
    expect(setup.body.results[0].type).toBe('ok');
    const kinds: [string, string][] = [
      ["INSERT INTO ck (u) VALUES ('a')", 'SQLITE_CONSTRAINT_UNIQUE'],
      ['INSERT INTO ck (nn) VALUES (NULL)', 'SQLITE_CONSTRAINT_NOTNULL'],
      ['INSERT INTO ck (c) VALUES (0)', 'SQLITE_CONSTRAINT_CHECK'],
      ['INSERT INTO ck (p) VALUES (99)', 'SQLITE_CONSTRAINT_FOREIGNKEY'],
      ['INSERT INTO ck (id) VALUES (1)', 'SQLITE_CONSTRAINT_PRIMARYKEY'],
      ['INSERT INTO wr VALUES (1)', 'SQLITE_CONSTRAINT_PRIMARYKEY'],
      ["INSERT INTO st VALUES ('text')", 'SQLITE_CONSTRAINT_DATATYPE'],
    ];
    const r = await pipeline({
      baton: null,
      requests: [
        ...kinds.map(([sql]) => ({ type: 'execute', stmt: { sql } })),
        { type: 'batch', batch: { steps: kinds.map(([sql]) => ({ stmt: { sql } })) } },
        { type: 'execute', stmt: { sql: 'SELECT nope' } },
        { type: 'close' },
      ],
    });
    kinds.forEach(([sql, extended], i) => {
      const expected = { code: 'SQLITE_CONSTRAINT', extended_code: extended };
      expect(r.body.results[i], sql).toMatchObject({ type: 'error', error: expected });
      expect(r.body.results[kinds.length].response.result.step_errors[i], sql).toMatchObject(expected);
    });
    // A primary code alone has no extended name to add.
    expect(r.body.results[kinds.length + 1].error).toEqual({
      code: 'SQLITE_ERROR',
      message: 'no such column: nope',
    });
  });

  it('refuses bad bodies with 400 and issues, on the pipeline and the v3 cursor', async () => {
    const bad = await pipeline({
      baton: null,
      requests: [{ type: 'execute', stmt: { sql: 'SELECT 1', args: [{ type: 'integer', value: '1.5' }] } }],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.issues.length).toBeGreaterThan(0);
    const cursor = await fetch(`${url}v3/cursor`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(cursor.status).toBe(400);
    expect((await json(cursor)).issues.length).toBeGreaterThan(0);
  });
});
