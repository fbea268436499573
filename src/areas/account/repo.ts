import { type Kysely, type Migration, sql } from 'kysely';
import type { PlanName } from '../../platform/plans.js';
import type { Dialect } from '../../store/db.js';
import type { Tables } from '../../store/schema.js';

interface AccountsTable {
  id: string;
  name: string;
  plan: string;
  created_at: number;
}

interface ApiKeysTable {
  id: string;
  account_id: string;
  name: string;
  /** First 16 hex chars of the SHA-256: the index used to find the row. */
  lookup: string;
  /** Full SHA-256 hex of the key, compared in constant time. */
  hash: string;
  /** First characters of the key, shown in listings so a person can tell keys apart. */
  preview: string;
  created_at: number;
  revoked_at: number | null;
  /** A scoped key's limits as JSON (KeyLimits); null for a full owner key. */
  scope: string | null;
  expires_at: number | null;
  /** The key that created this one (a scoped key revokes only its own). */
  parent_id: string | null;
  /** What nube minted the key for (`agent:<id>`, `machine:<id>`), revoked with it. */
  holder: string | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    accounts: AccountsTable;
    api_keys: ApiKeysTable;
  }
}

export const accountMigrations: Record<string, Migration> = {
  '0001-account-accounts': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('accounts')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('plan', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('lookup', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('preview', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('revoked_at', 'bigint')
        .execute();
      await db.schema.createIndex('api_keys_lookup').on('api_keys').column('lookup').execute();
      await db.schema.createIndex('api_keys_account').on('api_keys').column('account_id').execute();
    },
  },
};

export const keyScopeMigrations: Record<string, Migration> = {
  '0005-account-key-scopes': {
    async up(db: Kysely<unknown>) {
      for (const [name, type] of [
        ['scope', 'text'],
        ['expires_at', 'bigint'],
        ['parent_id', 'text'],
        ['holder', 'text'],
      ] as const) {
        await db.schema.alterTable('api_keys').addColumn(name, type).execute();
      }
      await db.schema.createIndex('api_keys_holder').on('api_keys').column('holder').execute();
    },
  },
};

/** A scoped key's limits as stored (JSON in api_keys.scope). */
export interface KeyLimits {
  scopes: string[];
  resourceIds?: string[];
  workspaceIds?: string[];
  caps?: Partial<Record<'aiCredits' | 'llmTokens' | 'webQueries' | 'sandboxCpuSeconds', number>>;
  allowedIps?: string[];
}

export interface AccountRow {
  id: string;
  name: string;
  plan: PlanName;
  createdAt: number;
}

export interface KeyRow {
  id: string;
  accountId: string;
  name: string;
  preview: string;
  createdAt: number;
  revokedAt: number | null;
  limits: KeyLimits | null;
  expiresAt: number | null;
  parentId: string | null;
  holder: string | null;
}

/** The advisory lock key replicas take around the owner's bootstrap (an arbitrary constant). */
const OWNER_BOOTSTRAP_LOCK = 6_172_493_001;
/** The last exclusive() turn per SQLite database, for the next one to wait on. */
const sqliteTurns = new WeakMap<object, Promise<void>>();

export class AccountRepo {
  constructor(
    private readonly db: Kysely<Tables>,
    private readonly dialect: Dialect = 'sqlite',
  ) {}

  /**
   * Runs `fn` while no other replica runs its own under the same lock: on PostgreSQL a session advisory
   * lock held on one pooled connection (fn's queries use others); on SQLite (one process holds the
   * file) one after the other within this process.
   */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    if (this.dialect !== 'postgres') {
      const before = sqliteTurns.get(this.db) ?? Promise.resolve();
      const run = before.then(fn, fn);
      sqliteTurns.set(
        this.db,
        run.then(
          () => {},
          () => {},
        ),
      );
      return run;
    }
    return this.db.connection().execute(async (conn) => {
      await sql`select pg_advisory_lock(${OWNER_BOOTSTRAP_LOCK})`.execute(conn);
      try {
        return await fn();
      } finally {
        await sql`select pg_advisory_unlock(${OWNER_BOOTSTRAP_LOCK})`.execute(conn);
      }
    });
  }

  async countAccounts(): Promise<number> {
    const r = await this.db.selectFrom('accounts').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async insertAccount(a: AccountRow): Promise<void> {
    await this.db.insertInto('accounts').values({ id: a.id, name: a.name, plan: a.plan, created_at: a.createdAt }).execute();
  }

  async getAccount(id: string): Promise<AccountRow | undefined> {
    const r = await this.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst();
    return r && { id: r.id, name: r.name, plan: r.plan as PlanName, createdAt: Number(r.created_at) };
  }

  async listAccounts(): Promise<AccountRow[]> {
    const rows = await this.db.selectFrom('accounts').selectAll().orderBy('created_at').execute();
    return rows.map((r) => ({ id: r.id, name: r.name, plan: r.plan as PlanName, createdAt: Number(r.created_at) }));
  }

  async setPlan(id: string, plan: PlanName): Promise<boolean> {
    const r = await this.db.updateTable('accounts').set({ plan }).where('id', '=', id).executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async insertKey(k: KeyRow & { lookup: string; hash: string }): Promise<void> {
    await this.db
      .insertInto('api_keys')
      .values({
        id: k.id,
        account_id: k.accountId,
        name: k.name,
        lookup: k.lookup,
        hash: k.hash,
        preview: k.preview,
        created_at: k.createdAt,
        revoked_at: null,
        scope: k.limits ? JSON.stringify(k.limits) : null,
        expires_at: k.expiresAt,
        parent_id: k.parentId,
        holder: k.holder,
      })
      .execute();
  }

  /** Live keys whose hash starts with `lookup`, with their account's plan. */
  async keysByLookup(lookup: string) {
    return this.db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select([
        'api_keys.id as id',
        'api_keys.hash as hash',
        'api_keys.account_id as accountId',
        'accounts.plan as plan',
        'api_keys.scope as scope',
        'api_keys.expires_at as expiresAt',
        'api_keys.holder as holder',
      ])
      .where('api_keys.lookup', '=', lookup)
      .where('api_keys.revoked_at', 'is', null)
      .execute();
  }

  /** The key's account and plan while the key is not revoked. */
  async liveKey(id: string) {
    return this.db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select(['api_keys.account_id as accountId', 'accounts.plan as plan', 'api_keys.scope as scope', 'api_keys.expires_at as expiresAt'])
      .where('api_keys.id', '=', id)
      .where('api_keys.revoked_at', 'is', null)
      .executeTakeFirst();
  }

  async keyName(id: string): Promise<string | undefined> {
    const r = await this.db.selectFrom('api_keys').select('name').where('id', '=', id).executeTakeFirst();
    return r?.name;
  }

  async listKeys(accountId?: string): Promise<KeyRow[]> {
    let q = this.db.selectFrom('api_keys').selectAll().orderBy('created_at');
    if (accountId) q = q.where('account_id', '=', accountId);
    const rows = await q.execute();
    return rows.map((r) => ({
      id: r.id,
      accountId: r.account_id,
      name: r.name,
      preview: r.preview,
      createdAt: Number(r.created_at),
      revokedAt: r.revoked_at === null ? null : Number(r.revoked_at),
      limits: r.scope ? (JSON.parse(r.scope) as KeyLimits) : null,
      expiresAt: r.expires_at === null ? null : Number(r.expires_at),
      parentId: r.parent_id,
      holder: r.holder,
    }));
  }

  /** The live keys nube minted for `holder` (a box), with their scope. */
  heldKeys(accountId: string, holder: string) {
    return this.db
      .selectFrom('api_keys')
      .select(['id', 'scope', 'expires_at as expiresAt'])
      .where('account_id', '=', accountId)
      .where('holder', '=', holder)
      .where('revoked_at', 'is', null)
      .execute();
  }

  /** Revokes the live keys minted for `holder`; returns their hashes (for the resolver's cache). */
  async revokeHeld(accountId: string, holder: string, now: number): Promise<string[]> {
    const r = await this.db
      .updateTable('api_keys')
      .set({ revoked_at: now })
      .where('account_id', '=', accountId)
      .where('holder', '=', holder)
      .where('revoked_at', 'is', null)
      .returning('hash')
      .execute();
    return r.map((x) => x.hash);
  }

  /** With `parentId`, only a key that one created (a scoped key revokes its own keys, not wider ones). */
  async revokeKey(id: string, accountId: string | undefined, now: number, parentId?: string): Promise<string | undefined> {
    let q = this.db.updateTable('api_keys').set({ revoked_at: now }).where('id', '=', id).where('revoked_at', 'is', null);
    if (accountId) q = q.where('account_id', '=', accountId);
    if (parentId) q = q.where('parent_id', '=', parentId);
    const r = await q.returning('hash').executeTakeFirst();
    return r?.hash;
  }
}
