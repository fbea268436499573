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
      requests: [{ type: 'close_sql', sql_id: 1 }, { type: 'execute', stmt: { sql: 'ROLLBACK' } }, { type: 'close' }, { type: 'get_autocommit' }],
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
              { condition: { type: 'error', step: 1 }, stmt: { sql: "SELECT x'00ff' AS b, 1.5 AS f, NULL AS n" } },
              { condition: { type: 'and', conds: [{ type: 'not', cond: { type: 'ok', step: 2 } }, { type: 'is_autocommit' }] }, stmt: { sql: 'SELECT 5' } },
            ],
          },
        },
        { type: 'close' },
      ],
    });
    const b = r.body.results[0].response.result;
    expect(b.step_results[0].rows).toEqual([[{ type: 'integer', value: '1' }]]);
    expect(b.step_results[1]).toBeNull();
    expect(b.step_errors[1]).toMatchObject({ code: 'SQLITE_ERROR', message: expect.stringMatching(/no such column: nope/) });
    expect(b.step_results[2]).toBeNull();
    expect(b.step_errors[2]).toBeNull();
    expect(b.step_results[3].rows).toEqual([[{ type: 'blob', base64: 'AP8=' }, { type: 'float', value: 1.5 }, { type: 'null' }]]);
    expect(b.step_results[4].rows).toEqual([[{ type: 'integer', value: '5' }]]);
    expect(r.body.baton).toBeNull();
  });

  it('refuses bad bodies with 400 and issues, and v3 cursors with 501', async () => {
    const bad = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT 1', args: [{ type: 'integer', value: '1.5' }] } }] });
    expect(bad.status).toBe(400);
    expect(bad.body.issues.length).toBeGreaterThan(0);
    const cursor = await fetch(`${url}v3/cursor`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(cursor.status).toBe(501);
  });
});
