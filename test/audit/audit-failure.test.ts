// When the audit entry of a call cannot be written, the call is answered 500 InternalError and nothing
// of the store's failure (a PostgreSQL SQLSTATE, SQLite's code, the message) reaches the client: also
// when the call's own answer was already an error (a 404, a 401), which Fastify would otherwise pass to
// its fallback handler with the store error's code. The failure is real: a trigger refuses the insert.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

const CLEAN = { error: 'internal error', code: 'InternalError' };

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
type Answer = { status: number; body: any; headers: Headers };

describe.each(DIALECTS)('a failing audit write (%s)', (dialect) => {
  let t: TestNube;
  const call = (method: string, path: string, body?: unknown, auth = t.auth): Promise<Answer> =>
    callJson(t.baseUrl, method, path, body, auth);
  const db = () => t.nube.deps.store.db;

  const refuseAuditWrites = async () => {
    if (dialect === 'postgres') {
      await sql`CREATE OR REPLACE FUNCTION audit_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit store refused by the test' USING ERRCODE = '53100'; END $$`.execute(
        db(),
      );
      await sql`CREATE TRIGGER audit_test_refuse BEFORE INSERT ON audit_entries FOR EACH ROW EXECUTE FUNCTION audit_test_refuse()`.execute(
        db(),
      );
    } else {
      await sql`CREATE TRIGGER audit_test_refuse BEFORE INSERT ON audit_entries BEGIN SELECT RAISE(ABORT, 'audit store refused by the test'); END`.execute(
        db(),
      );
    }
  };
  const allowAuditWrites = async () => {
    if (dialect === 'postgres') await sql`DROP TRIGGER audit_test_refuse ON audit_entries`.execute(db());
    else await sql`DROP TRIGGER audit_test_refuse`.execute(db());
  };

  beforeAll(async () => {
    t = await startNube({ dialect });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it('answers 500 InternalError with no store detail, whatever the call answered', async () => {
    await refuseAuditWrites();
    try {
      const answers = [
        await call('POST', '/databases', { name: 'unrecorded' }), // would have been 201
        await call('DELETE', '/databases/db_doesnotexist'), // a 404 from the error handler
        await call('POST', '/databases', { name: 5 }), // a 400 with issues
        await call(
          'POST',
          '/databases',
          { name: 'x' },
          { authorization: 'Bearer nube_sk_live_unknownunknownunknownunknownunknown00' },
        ), // a 401
      ];
      for (const r of answers) {
        const text = JSON.stringify(r.body);
        expect(r.status, text).toBe(500);
        expect(r.body).toEqual(CLEAN);
        expect(r.headers.get('content-type')).toContain('application/json');
        for (const leak of ['53100', 'SQLITE', 'refused by the test', 'audit_entries', 'P0001'])
          expect(text).not.toContain(leak);
      }
    } finally {
      await allowAuditWrites();
    }
    const ok = await call('POST', '/databases', { name: 'recorded' });
    expect(ok.status).toBe(201);
  });
});
