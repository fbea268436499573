import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AccountRepo } from '../../src/areas/account/repo.js';
import { AccountService, generateOwnerKey } from '../../src/areas/account/service.js';
import { areaMigrations } from '../../src/areas/index.js';
import { Usage, usageMigrations } from '../../src/platform/usage.js';
import { openStore, type Store } from '../../src/store/db.js';
import { migrateToLatest } from '../../src/store/migrate.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';

// The same bodies on SQLite and PostgreSQL.
describe.each(DIALECTS)('metadata store on %s', (dialect) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let svc: AccountService;
  let usage: Usage;

  beforeAll(async () => {
    if (dialect === 'postgres') {
      const pg = await createTempDatabase('store');
      store = openStore({ databaseUrl: pg.url, dataDir: '' });
      cleanup = pg.drop;
    } else {
      const dir = mkdtempSync(join(tmpdir(), 'nube-store-'));
      store = openStore({ dataDir: dir });
      cleanup = async () => rmSync(dir, { recursive: true, force: true });
    }
    const all = { ...usageMigrations, ...areaMigrations };
    await migrateToLatest(store.db, all);
    await migrateToLatest(store.db, all); // idempotent
    usage = new Usage(store.db);
    svc = new AccountService(new AccountRepo(store.db), usage, 0);
  });
  afterAll(async () => {
    await store.close();
    await cleanup();
  });

  it('runs a migration added later that sorts before ones already applied (an upgrade)', async () => {
    const { sql } = await import('kysely');
    const late = {
      '0000-test-late': {
        up: async (db: import('kysely').Kysely<unknown>) => {
          await sql`create table test_late_migration (id integer primary key)`.execute(db);
        },
      },
    };
    await migrateToLatest(store.db, { ...usageMigrations, ...areaMigrations, ...late });
    await sql`insert into test_late_migration (id) values (1)`.execute(store.db);
    const { rows } = await sql<{ n: number | string }>`select count(*) as n from test_late_migration`.execute(store.db);
    expect(Number(rows[0]!.n)).toBe(1);
  });

  it('creates accounts and resolves their keys; revoked and unknown keys resolve to nothing', async () => {
    const { account, secret } = await svc.createAccount({ name: 'a', plan: 'mega' });
    expect(secret).toMatch(/^nube_sk_live_[A-Za-z0-9]{40}$/);
    const p = await svc.ownerKeyResolver.resolve(secret);
    expect(p).toMatchObject({ scheme: 'owner', ownerId: account.id, plan: 'mega' });
    expect(await svc.ownerKeyResolver.resolve(generateOwnerKey())).toBeNull();

    const second = await svc.createKey(account.id, 'ci');
    expect((await svc.listKeys(account.id)).map((k) => k.name)).toEqual(['default', 'ci']);
    await svc.revokeKey(second.key.id, account.id);
    expect(await svc.ownerKeyResolver.resolve(second.secret)).toBeNull();
    expect(await svc.ownerKeyResolver.resolve(secret)).not.toBeNull();
    await expect(svc.revokeKey(second.key.id, account.id)).rejects.toMatchObject({ status: 404 });
  });

  it("one owner cannot revoke another owner's key (404)", async () => {
    const a = await svc.createAccount({ name: 'a', plan: 'byte' });
    const b = await svc.createAccount({ name: 'b', plan: 'byte' });
    await expect(svc.revokeKey(a.key.id, b.account.id)).rejects.toMatchObject({ status: 404 });
    expect(await svc.ownerKeyResolver.resolve(a.secret)).not.toBeNull();
  });

  it('stores only the SHA-256 of keys', async () => {
    const { secret } = await svc.createAccount({ name: 'c', plan: 'byte' });
    const rows = await store.db.selectFrom('api_keys').selectAll().execute();
    for (const r of rows) {
      expect(r.hash).toMatch(/^[0-9a-f]{64}$/);
      expect(JSON.stringify(r)).not.toContain(secret.slice(13));
    }
  });

  it('bootstraps the owner only on an empty store', async () => {
    expect((await svc.bootstrapOwner('tera')).created).toBe(false);
  });

  it('answers right with its statements kept prepared: the same query with other values, after a column is added', async () => {
    await sql`create table test_cached (id integer primary key, v text)`.execute(store.db);
    await sql`insert into test_cached (id, v) values (1, 'a'), (2, 'b'), (3, 'c')`.execute(store.db);
    const from = (id: number) => store.db.selectFrom('test_cached' as never).selectAll().where('id' as never, '>=', id as never).orderBy('id' as never).execute();
    for (const id of [3, 1, 2, 3]) expect((await from(id)).length).toBe(4 - id);
    expect(await from(3)).toEqual([{ id: 3, v: 'c' }]);
    // SQLite recompiles a prepared statement whose table changed; `select *` then has the new column.
    await sql`alter table test_cached add column w text default 'x'`.execute(store.db);
    expect(await from(3)).toEqual([{ id: 3, v: 'c', w: 'x' }]);
    await sql`drop table test_cached`.execute(store.db);
    await expect(from(3)).rejects.toThrow(/test_cached/);
  });

  it('meters monthly counters atomically', async () => {
    await Promise.all(Array.from({ length: 20 }, () => usage.add('acct_x', 'llmTokens', 5)));
    expect(await usage.counter('acct_x', 'llmTokens')).toBe(100);
    expect(await usage.counter('acct_x', 'llmTokens', new Date('2001-01-01'))).toBe(0);
  });
});

// Replicas starting at once on an empty store: one owner account and one key, whoever wins.
describe.each(DIALECTS)('owner bootstrap by replicas at once on %s', (dialect) => {
  it('creates exactly one owner account and key', async () => {
    const pg = dialect === 'postgres' ? await createTempDatabase('boot') : undefined;
    const dir = mkdtempSync(join(tmpdir(), 'nube-boot-'));
    // Each replica its own store (its own pool), as separate processes have.
    const stores = Array.from({ length: pg ? 4 : 1 }, () => openStore(pg ? { databaseUrl: pg.url, dataDir: '' } : { dataDir: dir }));
    try {
      await migrateToLatest(stores[0]!.db, { ...usageMigrations, ...areaMigrations });
      // Connections open ahead, so every replica's count runs at once (not one behind a connect).
      await Promise.all(stores.flatMap((s) => Array.from({ length: 4 }, () => sql`select 1`.execute(s.db))));
      const key = generateOwnerKey();
      const replicas = Array.from({ length: 8 }, (_, i) => {
        const s = stores[i % stores.length]!;
        return new AccountService(new AccountRepo(s.db, s.dialect), new Usage(s.db), 0);
      });
      const results = await Promise.all(replicas.map((svc) => svc.bootstrapOwner('tera', key)));
      expect(results.filter((r) => r.created)).toHaveLength(1);
      expect(await stores[0]!.db.selectFrom('accounts').select('id').execute()).toHaveLength(1);
      expect(await stores[0]!.db.selectFrom('api_keys').select('id').execute()).toHaveLength(1);
      expect(await replicas[3]!.ownerKeyResolver.resolve(key)).toMatchObject({ plan: 'tera' });
    } finally {
      for (const s of stores) await s.close();
      await pg?.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
