import type { Kysely } from 'kysely';
import type { Tables } from '../../store/schema.js';
import type { CredentialResolver, Principal } from '../../platform/auth.js';
import { SCHEMES } from '../../platform/auth.js';
import { sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { PlanName } from '../../platform/plans.js';
import type { DatabaseTokenRow, DatabaseTokensRepo } from './token-repo.js';

export interface DatabaseTokenOut {
  id: string;
  databaseId: string;
  name: string | null;
  preview: string;
  createdAt: string;
}

/** Tokens an owner may hold per database: enough for a few apps and rotation, bounded for the table. */
const MAX_PER_DATABASE = 50;

/**
 * Database tokens (`nube_db_...`): SQL on one database and nothing else, for apps that should not
 * hold the account key (the libSQL `authToken`). Stored as SHA-256; revoking deletes the row. A
 * resolved token is cached for `cacheMs` (the platform's auth cache), so a revoked one stops
 * working within that time on every replica.
 */
export class DatabaseTokens {
  private readonly cache = new Map<string, { principal: Principal | null; until: number }>();

  constructor(
    private readonly repo: DatabaseTokensRepo,
    private readonly planOf: (ownerId: string) => Promise<PlanName>,
    private readonly cacheMs: number,
  ) {}

  async create(p: Principal, databaseId: string, name?: string): Promise<DatabaseTokenOut & { token: string }> {
    if ((await this.repo.list(p.ownerId, databaseId)).length >= MAX_PER_DATABASE) {
      throw errors.forbidden(`a database may have at most ${MAX_PER_DATABASE} tokens; revoke one first`, 'PlanLimitReached');
    }
    const token = SCHEMES.database.prefix + randomToken(40, BASE62);
    const row: DatabaseTokenRow = {
      id: newId('dbt'),
      owner_id: p.ownerId,
      database_id: databaseId,
      hash: sha256Hex(token),
      preview: `${token.slice(0, 12)}…`,
      name: name ?? null,
      created_at: Date.now(),
    };
    await this.repo.insert(row);
    return { ...view(row), token };
  }

  async list(p: Principal, databaseId: string): Promise<{ items: DatabaseTokenOut[] }> {
    return { items: (await this.repo.list(p.ownerId, databaseId)).map(view) };
  }

  async revoke(p: Principal, databaseId: string, id: string): Promise<{ ok: true }> {
    if (!(await this.repo.delete(p.ownerId, databaseId, id))) throw errors.notFound('database token');
    this.cache.clear();
    return { ok: true };
  }

  /** The database is being deleted: its tokens go with it (in the delete's transaction). */
  async deleteAll(ownerId: string, databaseId: string, trx?: Kysely<Tables>): Promise<void> {
    await this.repo.deleteAll(ownerId, databaseId, trx);
    this.cache.clear();
  }

  readonly resolver: CredentialResolver = {
    scheme: 'database',
    resolve: (credential) => {
      const hash = sha256Hex(credential);
      const hit = this.cache.get(hash);
      if (hit && hit.until > Date.now()) return hit.principal;
      return this.lookup(hash);
    },
  };

  private async lookup(hash: string): Promise<Principal | null> {
    const row = await this.repo.byHash(hash);
    const principal: Principal | null = row
      ? {
          scheme: 'database',
          ownerId: row.owner_id,
          plan: await this.planOf(row.owner_id),
          credentialId: row.id,
          resourceId: row.database_id,
        }
      : null;
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(hash, { principal, until: Date.now() + this.cacheMs });
    return principal;
  }
}

function view(r: DatabaseTokenRow): DatabaseTokenOut {
  return {
    id: r.id,
    databaseId: r.database_id,
    name: r.name,
    preview: r.preview,
    createdAt: new Date(Number(r.created_at)).toISOString(),
  };
}
