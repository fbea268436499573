// Refusals of unknown keys cost an attacker nothing: each one was an audit write. Per source address and
// window the first few are entries of their own and the rest one entry with their count (`repeats`), so
// a flood writes a bounded number of rows and the log still says how many refusals there were.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditKey, verifyChains } from '../../src/areas/audit/chain.js';
import { REFUSALS_PER_ADDRESS } from '../../src/areas/audit/refusals.js';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

const FLOOD = 60;

describe.each(DIALECTS)('refused unknown keys in the audit log (%s)', (dialect) => {
  let t: TestNube;
  const accountless = () =>
    t.nube.deps.store.db
      .selectFrom('audit_entries')
      .select(['operation', 'status', 'source_ip', 'repeats', 'error_code'])
      .where('owner_id', '=', '')
      .orderBy('seq')
      .execute();

  beforeAll(async () => {
    t = await startNube({ dialect, env: { NUBE_AUDIT_REFUSAL_WINDOW_S: '600' } });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it("a flood from one address writes a few entries, then one count at the window's end; every refusal is in the record", async () => {
    const before = await accountless();
    const answers = await Promise.all(
      Array.from({ length: FLOOD }, (_, i) =>
        callJson(
          t.baseUrl,
          i % 2 ? 'POST' : 'GET',
          i % 2 ? '/databases' : '/account',
          i % 2 ? { name: 'x' } : undefined,
          {
            authorization: `Bearer nube_sk_live_${'unknown'.padEnd(40, String(i % 10))}`,
          },
        ),
      ),
    );
    expect(answers.every((a) => a.status === 401)).toBe(true);
    // Written at once: the address's first few of the window (a 10-minute one: the flood is inside it).
    const now = await accountless();
    const written = now.length - before.length;
    expect(written).toBeLessThanOrEqual(REFUSALS_PER_ADDRESS);
    if (before.length === 0) expect(written).toBe(REFUSALS_PER_ADDRESS);
    // The window's end (here: the flush close() also does) writes the rest as one count: nothing is lost.
    await t.nube.services.audit.refusals!.flush();
    const rows = await accountless();
    const added = rows.slice(before.length);
    expect(added.length).toBe(written + 1);
    const count = added.filter((e) => e.repeats !== null && e.repeats !== undefined);
    expect(count).toHaveLength(1);
    expect(count[0]).toMatchObject({
      status: 401,
      source_ip: '127.0.0.1',
      error_code: 'Unauthorized',
      repeats: FLOOD - written,
    });
    // The chain holds with the counted entry in it.
    const v = await verifyChains(t.nube.deps.store.db, auditKey(t.nube.deps.config.secret), '');
    expect(v.problems).toEqual([]);
    expect(v.entries).toBe(rows.length);
  }, 60_000);

  it("a known key's refusal is not counted with them: it is its account's, scoped keys included", async () => {
    const k = await callJson(
      t.baseUrl,
      'POST',
      '/account/keys',
      { name: 'narrow', scopes: ['account:read'] },
      t.auth,
    );
    expect(k.status).toBe(201);
    const r = await callJson(
      t.baseUrl,
      'POST',
      '/databases',
      { name: 'y' },
      { authorization: `Bearer ${k.body.secret}` },
    );
    expect(r.status).toBe(403);
    const mine = await t.nube.deps.store.db
      .selectFrom('audit_entries')
      .select(['key_id', 'repeats'])
      .where('key_id', '=', k.body.id)
      .execute();
    expect(mine).toEqual([{ key_id: k.body.id, repeats: null }]);
  });
});
