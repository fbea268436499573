import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AccountRepo } from '../../src/areas/account/repo.js';
import { AccountService } from '../../src/areas/account/service.js';
import { areaMigrations, operations } from '../../src/areas/index.js';
import type { Principal } from '../../src/platform/auth.js';
import { ScopeCatalog } from '../../src/platform/scope-catalog.js';
import { Usage, usageMigrations } from '../../src/platform/usage.js';
import { openStore, type Store } from '../../src/store/db.js';
import { migrateToLatest } from '../../src/store/migrate.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';

// Keys nube mints for a box (an agent's or machine's nubeKey) and key caps, on both metadata stores.
describe.each(DIALECTS)('scoped keys in the store on %s', (dialect) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let svc: AccountService;
  let usage: Usage;

  beforeAll(async () => {
    if (dialect === 'postgres') {
      const pg = await createTempDatabase('keys');
      store = openStore({ databaseUrl: pg.url, dataDir: '' });
      cleanup = pg.drop;
    } else {
      const dir = mkdtempSync(join(tmpdir(), 'nube-keys-'));
      store = openStore({ dataDir: dir });
      cleanup = async () => rmSync(dir, { recursive: true, force: true });
    }
    await migrateToLatest(store.db, { ...usageMigrations, ...areaMigrations });
    usage = new Usage(store.db);
    svc = new AccountService(new AccountRepo(store.db, dialect), usage, 0);
    svc.useCatalog(new ScopeCatalog(operations), async () => false);
  });
  afterAll(async () => {
    await store.close();
    await cleanup();
  });

  const resolve = async (secret: string) => (await svc.ownerKeyResolver.resolve(secret)) as Principal | null;

  it('a key held by a box resolves with its scope and is revoked with the box', async () => {
    const { secret: ownerSecret } = await svc.createAccount({ name: 'a', plan: 'mega' });
    const owner = (await resolve(ownerSecret))!;
    expect(owner.scope).toBeUndefined();
    const { key, secret } = await svc.createKeyFor(owner, { name: 'agent agt_1', scopes: ['databases:read'], holder: 'agent:agt_1' });
    expect(key.holder).toBe('agent:agt_1');
    const p = (await resolve(secret))!;
    expect(p.scope?.allowed.has('databases.list')).toBe(true);
    expect(p.scope?.allowed.has('databases.create')).toBe(false);
    // A box's own key mints nothing wider than itself.
    await expect(svc.createKeyFor(p, { name: 'wider', scopes: ['databases:write'] })).rejects.toMatchObject({ status: 403, code: 'KeyScopeTooWide' });
    // It is bound to its box (the box API), and so is every key it creates: none escapes the box.
    expect(p.holder).toBe('agent:agt_1');
    const child = await svc.createKeyFor(p, { name: 'child', scopes: ['databases:read'] });
    expect(child.key.holder).toBe('agent:agt_1');
    expect((await resolve(child.secret))!.holder).toBe('agent:agt_1');
    expect(owner.holder).toBeUndefined();
    await svc.revokeHeld(owner.ownerId, 'agent:agt_1');
    expect(await resolve(secret)).toBeNull();
    expect(await resolve(child.secret)).toBeNull();
    expect(await resolve(ownerSecret)).not.toBeNull();
  });

  it('caps: what a capped key consumes is counted for it; past the cap 402 KeyCapReached', async () => {
    const { secret: ownerSecret } = await svc.createAccount({ name: 'b', plan: 'mega' });
    const owner = (await resolve(ownerSecret))!;
    const { secret } = await svc.createKeyFor(owner, { name: 'capped', scopes: ['web:read'], caps: { webQueries: 2 } });
    const p = (await resolve(secret))!;
    await usage.assertKeyCaps(p);
    await usage.addForKey(p, 'webQueries', 2);
    await expect(usage.assertKeyCaps(p)).rejects.toMatchObject({ status: 402, code: 'KeyCapReached' });
    // The owner's own key has no cap, and the key's use is not charged twice to the account.
    await usage.assertKeyCaps(owner);
    expect(await usage.counter(owner.ownerId, 'webQueries')).toBe(0);
  });
});
