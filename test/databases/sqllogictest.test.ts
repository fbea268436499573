import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type QueryResult, queryResultSchema } from '../../src/areas/databases/engine/index.js';
import { runSlt, SLT_SKIP, sltCorpus } from '../../src/areas/databases/engine/sqllogictest.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { caller } from './helpers.js';

// Every record of the shared sqllogictest corpus through POST /query over HTTP, so the JSON
// encoding of integers, reals, text, NULL and blobs is checked end to end, not just in the engine.

describe.skipIf(SLT_SKIP)('sqllogictest corpus through POST /databases/{dbId}/query', () => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  beforeAll(async () => {
    t = await startNube();
    call = caller(t);
  });
  afterAll(() => t?.close());

  const cases = sltCorpus();
  it('finds the corpus', () => {
    expect(cases.length).toBeGreaterThanOrEqual(14);
  });

  for (const c of cases) {
    it(`passes every record of ${c.name}`, async () => {
      const db = await json(await call('POST', '/databases', { name: c.dbName }));
      // Only a 400 carrying SQLite's code is an SQL error; any other answer fails the file outright.
      const unexpected: string[] = [];
      const exec = async (sql: string): Promise<QueryResult> => {
        const r = await call('POST', `/databases/${db.id}/query`, { sql });
        const body = await json(r);
        if (r.status === 200) return queryResultSchema.parse(body);
        if (r.status !== 400 || !/^SQLITE_/.test(body.code))
          unexpected.push(`${r.status} ${JSON.stringify(body)} for ${sql}`);
        throw new Error(body.error);
      };
      const report = await runSlt(c.name, c.records(), exec);
      expect(unexpected.slice(0, 5)).toEqual([]);
      expect(report.failures.slice(0, 5)).toEqual([]);
      expect(report.passed).toBeGreaterThan(0);
      expect((await call('DELETE', `/databases/${db.id}`)).status).toBe(200);
    }, 120_000);
  }
});
