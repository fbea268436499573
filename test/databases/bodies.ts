// Test bodies of databases through the API only, run by test/databases/crud.test.ts on one nube in
// process and by test/nodes/processes.test.ts through a client that spreads each request over three
// nube processes (`caller` reads the base URL per request).
import { expect } from 'vitest';
import { type caller, json } from '../helpers/server.js';

type Call = ReturnType<typeof caller>;

/** Size and rows read/written of a database, after a table, a batch insert and a select. */
export async function usageBody(call: Call): Promise<void> {
  const db = await json(await call('POST', '/databases', { name: 'usage' }));
  const q = (body: unknown) => call('POST', `/databases/${db.id}/query`, body);
  expect((await q({ sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' })).status).toBe(200);
  expect(
    (
      await q({
        table: 't',
        columns: ['id', 'v'],
        rows: [
          [1, 'a'],
          [2, 'b'],
          [3, 'c'],
        ],
      })
    ).status,
  ).toBe(200);
  expect((await q({ sql: 'SELECT * FROM t' })).status).toBe(200);
  const got = await json(await call('GET', `/databases/${db.id}`));
  expect(got.rowsWritten).toBe(3);
  expect(got.rowsRead).toBe(3);
  expect(got.sizeBytes).toBeGreaterThan(4096);
}

/** Another owner's database is a 404 on every route and stays as it was. */
export async function otherOwnerBody(call: Call, otherKey: string): Promise<void> {
  const mine = await json(await call('POST', '/databases', { name: 'private' }));
  await call('POST', `/databases/${mine.id}/query`, { sql: 'CREATE TABLE s (x)' });
  for (const [method, path, body] of [
    ['GET', `/databases/${mine.id}`],
    ['DELETE', `/databases/${mine.id}`],
    ['POST', `/databases/${mine.id}/query`, { sql: 'SELECT 1' }],
    ['GET', `/databases/${mine.id}/export`],
  ] as const) {
    const r = await call(method, path, body, otherKey);
    expect(r.status, `${method} ${path}`).toBe(404);
  }
  expect(
    (await json(await call('GET', '/databases', undefined, otherKey))).items.map(
      (d: { id: string }) => d.id,
    ),
  ).not.toContain(mine.id);
  const still = await call('POST', `/databases/${mine.id}/query`, { sql: 'SELECT count(*) FROM s' });
  expect(still.status).toBe(200);
  expect((await call('GET', '/databases/db_nonexistent000000000')).status).toBe(404);
  expect((await call('GET', '/databases/..%2Fnube.db')).status).toBe(404);
}
