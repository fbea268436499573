import type { Kysely, Migration } from 'kysely';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { Tables } from '../../store/schema.js';

// Scoped credentials for the LLM gateway: one per subject (an agent, a fleet box). Only the SHA-256 is
// stored; the secret is handed to the subject once. A credential made for a sandbox names that
// sandbox's address on the bridge, and the gateway takes it from that address only: read by anything in
// the sandbox (the agent's own tools can), it is worth nothing from any other sandbox.

/** Prefix of gateway credentials: not an API scheme, so no API operation accepts one. */
export const LLM_CREDENTIAL_PREFIX = 'nube_llm_';

interface LlmCredentialsTable {
  id: string;
  owner_id: string;
  /** What the credential is for, e.g. `agent:agt_...`; revoked with it. */
  subject: string;
  lookup: string;
  hash: string;
  /** The only source address the gateway takes it from (a sandbox's bridge address); null: any. */
  address: string | null;
  created_at: number;
  revoked_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    llm_credentials: LlmCredentialsTable;
  }
}

export const llmMigrations: Record<string, Migration> = {
  '0008-llm-credentials': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('llm_credentials')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('subject', 'text', (c) => c.notNull())
        .addColumn('lookup', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('revoked_at', 'bigint')
        .execute();
      await db.schema.createIndex('llm_credentials_lookup').on('llm_credentials').column('lookup').execute();
      await db.schema.createIndex('llm_credentials_subject').on('llm_credentials').column('subject').execute();
    },
  },
  '0200-llm-credential-address': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('llm_credentials').addColumn('address', 'text').execute();
    },
  },
};

export interface CredentialOwner {
  id: string;
  ownerId: string;
  subject: string;
  /** The only source address it is taken from; null: any. */
  address: string | null;
}

export class LlmCredentials {
  // Resolved credentials are cached briefly (the gateway's hot path); revoke clears this process's entry.
  private readonly cache = new Map<string, { owner: CredentialOwner; until: number }>();

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly cacheMs: number,
  ) {}

  async issue(ownerId: string, subject: string, address: string | null): Promise<string> {
    const secret = LLM_CREDENTIAL_PREFIX + randomToken(40, BASE62);
    const hash = sha256Hex(secret);
    await this.db
      .insertInto('llm_credentials')
      .values({ id: newId('llmc'), owner_id: ownerId, subject, lookup: hash.slice(0, 16), hash, address, created_at: Date.now(), revoked_at: null })
      .execute();
    return secret;
  }

  /** Revokes every credential of the subject (the agent was deleted or revived with a new one). */
  async revoke(subject: string): Promise<void> {
    await this.db
      .updateTable('llm_credentials')
      .set({ revoked_at: Date.now() })
      .where('subject', '=', subject)
      .where('revoked_at', 'is', null)
      .execute();
    for (const [k, v] of this.cache) if (v.owner.subject === subject) this.cache.delete(k);
  }

  async resolve(secret: string): Promise<CredentialOwner | null> {
    if (!secret.startsWith(LLM_CREDENTIAL_PREFIX)) return null;
    const hit = this.cache.get(secret);
    if (hit && hit.until > Date.now()) return hit.owner;
    const hash = sha256Hex(secret);
    const rows = await this.db
      .selectFrom('llm_credentials')
      .selectAll()
      .where('lookup', '=', hash.slice(0, 16))
      .where('revoked_at', 'is', null)
      .execute();
    const row = rows.find((r) => safeEqual(r.hash, hash));
    if (!row) return null;
    const owner = { id: row.id, ownerId: row.owner_id, subject: row.subject, address: row.address };
    if (this.cacheMs > 0) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(secret, { owner, until: Date.now() + this.cacheMs });
    }
    return owner;
  }
}
