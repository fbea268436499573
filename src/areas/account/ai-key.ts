import type { Kysely, Migration } from 'kysely';
import type { SecretBox } from '../../platform/crypto.js';
import type { Tables } from '../../store/schema.js';

// The account's own "AI key": an OpenAI-compatible endpoint and key that features acting for the
// account (semantic file search) call with. The key is sealed at rest and never returned.

interface AiKeysTable {
  account_id: string;
  base_url: string;
  model: string;
  sealed_key: string;
  preview: string;
  updated_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    account_ai_keys: AiKeysTable;
  }
}

export const aiKeyMigrations: Record<string, Migration> = {
  '0004-account-ai-keys': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('account_ai_keys')
        .addColumn('account_id', 'text', (c) => c.primaryKey().references('accounts.id').onDelete('cascade'))
        .addColumn('base_url', 'text', (c) => c.notNull())
        .addColumn('model', 'text', (c) => c.notNull())
        .addColumn('sealed_key', 'text', (c) => c.notNull())
        .addColumn('preview', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};

export interface AiKey {
  baseUrl: string;
  apiKey: string;
  model: string;
}

export interface AiKeyView {
  configured: boolean;
  baseUrl: string | null;
  model: string | null;
  keyPreview: string | null;
  updatedAt: string | null;
}

export class AiKeys {
  constructor(
    private readonly db: Kysely<Tables>,
    private readonly box: SecretBox,
  ) {}

  async set(accountId: string, k: AiKey): Promise<AiKeyView> {
    const row = {
      account_id: accountId,
      base_url: k.baseUrl.replace(/\/$/, ''),
      model: k.model,
      sealed_key: this.box.seal(k.apiKey),
      preview: `${k.apiKey.slice(0, 4)}…${k.apiKey.slice(-2)}`,
      updated_at: Date.now(),
    };
    await this.db
      .insertInto('account_ai_keys')
      .values(row)
      .onConflict((oc) => oc.column('account_id').doUpdateSet({ ...row }))
      .execute();
    return this.view(accountId);
  }

  async view(accountId: string): Promise<AiKeyView> {
    const r = await this.db.selectFrom('account_ai_keys').selectAll().where('account_id', '=', accountId).executeTakeFirst();
    if (!r) return { configured: false, baseUrl: null, model: null, keyPreview: null, updatedAt: null };
    return { configured: true, baseUrl: r.base_url, model: r.model, keyPreview: r.preview, updatedAt: new Date(Number(r.updated_at)).toISOString() };
  }

  async get(accountId: string): Promise<AiKey | undefined> {
    const r = await this.db.selectFrom('account_ai_keys').selectAll().where('account_id', '=', accountId).executeTakeFirst();
    return r ? { baseUrl: r.base_url, model: r.model, apiKey: this.box.open(r.sealed_key) } : undefined;
  }

  async remove(accountId: string): Promise<void> {
    await this.db.deleteFrom('account_ai_keys').where('account_id', '=', accountId).execute();
  }
}
