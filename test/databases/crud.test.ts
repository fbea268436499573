import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NubeError } from '../../packages/sdk/src/index.js';
import type { BusEvent } from '../../src/platform/events.js';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { otherOwnerBody, usageBody } from './bodies.js';
import { caller, sdk } from './helpers.js';

describe.each(DIALECTS)('databases CRUD (%s)', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  let otherKey: string;
  const events: BusEvent[] = [];

  beforeAll(async () => {
    t = await startNube({ dialect });
    call = caller(t);
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
    t.nube.deps.bus.subscribe((e) => {
      if (e.event.startsWith('database.')) events.push(e);
    });
  });
  afterAll(() => t?.close());

  it('creates, lists, gets and deletes a database through the SDK, with events', async () => {
    const nube = sdk(t);
    const db = await nube.databases.create({ name: 'Orders-2024', description: 'shop orders' });
    expect(db).toMatchObject({
      name: 'Orders-2024',
      description: 'shop orders',
      rowsRead: 0,
      rowsWritten: 0,
    });
    expect(db.id).toMatch(/^db_[0-9a-z]+$/);
    expect(db.sizeBytes).toBeGreaterThan(0);
    expect(Date.parse(db.createdAt)).toBeGreaterThan(Date.now() - 60_000);

    const list = await nube.databases.list();
    expect(list.items.map((d) => d.id)).toContain(db.id);
    expect(await nube.databases.get(db.id)).toEqual(db);

    await vi_waitFor(() => events.some((e) => e.event === 'database.created' && e.data.id === db.id));
    const created = events.find((e) => e.event === 'database.created' && e.data.id === db.id);
    expect(created?.ownerId).toBe((await nube.account.get()).id);
    expect(created?.data).toMatchObject({ id: db.id, name: 'Orders-2024' });

    expect(await nube.databases.delete(db.id)).toEqual({ ok: true });
    await vi_waitFor(() => events.some((e) => e.event === 'database.deleted' && e.data.id === db.id));
    const gone = await call('GET', `/databases/${db.id}`);
    expect(gone.status).toBe(404);
    expect((await nube.databases.list()).items.map((d) => d.id)).not.toContain(db.id);
  });

  it('reports size and rows read/written per database', () => usageBody(call));

  it('validates names: letters, digits and hyphens, max 64; body fields', async () => {
    for (const name of ['', 'has space', 'under_score', 'dot.name', 'ñandú', 'x'.repeat(65)]) {
      const r = await call('POST', '/databases', { name });
      expect(r.status, name).toBe(400);
      expect((await json(r)).code).toBe('ValidationError');
    }
    expect((await call('POST', '/databases', {})).status).toBe(400);
    expect((await call('POST', '/databases', { name: 'ok', description: 5 })).status).toBe(400);
    const max = await call('POST', '/databases', { name: 'a'.repeat(64) });
    expect(max.status).toBe(201);
  });

  it('answers 409 for a second database with the same name, per owner', async () => {
    expect((await call('POST', '/databases', { name: 'dup' })).status).toBe(201);
    const again = await call('POST', '/databases', { name: 'dup' });
    expect(again.status).toBe(409);
    expect(await json(again)).toMatchObject({ code: 'DatabaseNameTaken' });
    // Another owner may use the same name.
    expect((await call('POST', '/databases', { name: 'dup' }, otherKey)).status).toBe(201);
    try {
      await sdk(t).databases.create({ name: 'dup' });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(NubeError);
      expect((err as NubeError).status).toBe(409);
    }
  });

  it("answers 403 PlanLimitReached past the plan's allowance (Byte: 3)", async () => {
    const { secret } = await t.nube.services.account.createAccount({ name: 'byte-user', plan: 'byte' });
    for (let i = 0; i < 3; i++)
      expect((await call('POST', '/databases', { name: `b${i}` }, secret)).status).toBe(201);
    const fourth = await call('POST', '/databases', { name: 'b3' }, secret);
    expect(fourth.status).toBe(403);
    expect(await json(fourth)).toMatchObject({ code: 'PlanLimitReached', limit: 3, current: 3 });
    // Deleting one frees a slot.
    const list = await json(await call('GET', '/databases', undefined, secret));
    expect(list.items).toHaveLength(3);
    expect((await call('DELETE', `/databases/${list.items[0].id}`, undefined, secret)).status).toBe(200);
    expect((await call('POST', '/databases', { name: 'b3' }, secret)).status).toBe(201);
  });

  it("answers 404 for another owner's database on every route, and leaves it alone", () => otherOwnerBody(call, otherKey));

  it('DELETE removes every file of the database', async () => {
    const db = await json(await call('POST', '/databases', { name: 'doomed' }));
    const dir = join(t.dataDir, 'databases');
    await call('POST', `/databases/${db.id}/query`, { sql: 'CREATE TABLE big (b BLOB)' });
    await call('POST', `/databases/${db.id}/query`, { sql: 'INSERT INTO big VALUES (randomblob(100000))' });
    const files = () => readdirSync(dir).filter((f) => f.startsWith(db.id));
    expect(files().length).toBeGreaterThan(0);
    expect((await call('DELETE', `/databases/${db.id}`)).status).toBe(200);
    expect(files()).toEqual([]);
    expect(existsSync(join(dir, `${db.id}.sqlite`))).toBe(false);
    const q = await call('POST', `/databases/${db.id}/query`, { sql: 'SELECT 1' });
    expect(q.status).toBe(404);
    expect((await call('DELETE', `/databases/${db.id}`)).status).toBe(404);
  });

  it('reports the databases gauge and storage in account usage', async () => {
    const n = await t.nube.deps.usage.gauge('databases', (await sdk(t).account.get()).id);
    const list = await json(await call('GET', '/databases'));
    expect(n).toBe(list.items.length);
  });
});

/** Ends as soon as `cond` holds; the limit is generous for a busy machine. */
async function vi_waitFor(cond: () => boolean, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
