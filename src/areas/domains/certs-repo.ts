import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

// Certificates nube got from the ACME CA for verified custom domains (private keys sealed with the
// platform's SecretBox: never plaintext at rest), the ACME account key per directory (sealed too),
// and the HTTP-01 answers in flight (in the store, so any replica answers the CA's request).

interface TlsCertsTable {
  domain: string;
  cert_pem: string;
  key_sealed: string;
  not_after: number;
  issued_at: number;
}
interface TlsAcmeAccountsTable {
  directory_url: string;
  key_sealed: string;
  created_at: number;
}
interface TlsChallengesTable {
  token: string;
  key_authorization: string;
  expires_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    tls_certs: TlsCertsTable;
    tls_acme_accounts: TlsAcmeAccountsTable;
    tls_challenges: TlsChallengesTable;
  }
}

export type CertRow = TlsCertsTable;

export const certsMigrations: Record<string, Migration> = {
  '0121-domains-tls': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('tls_certs')
        .addColumn('domain', 'text', (c) => c.primaryKey())
        .addColumn('cert_pem', 'text', (c) => c.notNull())
        .addColumn('key_sealed', 'text', (c) => c.notNull())
        .addColumn('not_after', 'bigint', (c) => c.notNull())
        .addColumn('issued_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('tls_acme_accounts')
        .addColumn('directory_url', 'text', (c) => c.primaryKey())
        .addColumn('key_sealed', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('tls_challenges')
        .addColumn('token', 'text', (c) => c.primaryKey())
        .addColumn('key_authorization', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};

const fix = (r: CertRow): CertRow => ({ ...r, not_after: Number(r.not_after), issued_at: Number(r.issued_at) });

export class CertsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async get(domain: string): Promise<CertRow | undefined> {
    const r = await this.db.selectFrom('tls_certs').selectAll().where('domain', '=', domain).executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  async put(row: CertRow): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('tls_certs').where('domain', '=', row.domain).execute();
      await trx.insertInto('tls_certs').values(row).execute();
    });
  }
  async delete(domain: string): Promise<void> {
    await this.db.deleteFrom('tls_certs').where('domain', '=', domain).execute();
  }
  /** Certificates expiring before `before` (ms), soonest first. */
  async expiring(before: number): Promise<CertRow[]> {
    return (await this.db.selectFrom('tls_certs').selectAll().where('not_after', '<', before).orderBy('not_after').execute()).map(fix);
  }

  async accountKey(directoryUrl: string): Promise<string | undefined> {
    const r = await this.db.selectFrom('tls_acme_accounts').select('key_sealed').where('directory_url', '=', directoryUrl).executeTakeFirst();
    return r?.key_sealed;
  }
  async putAccountKey(directoryUrl: string, sealed: string): Promise<void> {
    await this.db.insertInto('tls_acme_accounts').values({ directory_url: directoryUrl, key_sealed: sealed, created_at: Date.now() }).execute();
  }

  async putChallenge(token: string, keyAuthorization: string, ttlMs: number): Promise<void> {
    await this.db.deleteFrom('tls_challenges').where('expires_at', '<', Date.now()).execute();
    await this.db.insertInto('tls_challenges').values({ token, key_authorization: keyAuthorization, expires_at: Date.now() + ttlMs }).execute();
  }
  async challenge(token: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom('tls_challenges')
      .select('key_authorization')
      .where('token', '=', token)
      .where('expires_at', '>', Date.now())
      .executeTakeFirst();
    return r?.key_authorization;
  }
  async deleteChallenge(token: string): Promise<void> {
    await this.db.deleteFrom('tls_challenges').where('token', '=', token).execute();
  }
}
