import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

export type WebhookStatus = 'ACTIVE' | 'PAUSED';
/**
 * pending: an attempt is due (now or after a backoff); succeeded: a 2xx arrived; failed: every attempt
 * of the retry schedule failed; skipped: not sent, or its retries dropped, because the webhook was
 * PAUSED. failed and skipped deliveries can be redelivered.
 */
export type DeliveryStatus = 'pending' | 'succeeded' | 'failed' | 'skipped';

interface WebhooksTable {
  id: string;
  owner_id: string;
  url: string;
  /** JSON array of event names. */
  events: string;
  status: WebhookStatus;
  /** The signing secret sealed with the SecretBox: it signs every delivery, so it cannot be hashed. */
  secret: string;
  /** Consecutive failed attempts across all deliveries; 5 pauses the webhook. */
  failure_count: number;
  last_delivery_at: number | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

interface DeliveriesTable {
  id: string;
  webhook_id: string;
  owner_id: string;
  event: string;
  /** The exact bytes POSTed (signed once, identical on every retry). */
  body: string;
  status: DeliveryStatus;
  /** Attempts made so far (all rounds). */
  attempts: number;
  /** `attempts` when the current retry round began (0, or the count at the last redeliver). */
  round_start: number;
  next_attempt_at: number | null;
  last_status_code: number | null;
  last_error: string | null;
  /** JSON array of the most recent AttemptRecords. */
  log: string;
  created_at: number;
  updated_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    webhooks: WebhooksTable;
    webhook_deliveries: DeliveriesTable;
  }
}

export type WebhookRow = Selectable<WebhooksTable>;
export type DeliveryRow = Selectable<DeliveriesTable>;

export interface AttemptRecord {
  attempt: number;
  at: number;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  /** First bytes of the receiver's response body, for debugging. */
  response: string | null;
}

export const webhooksMigrations: Record<string, Migration> = {
  '0005-webhooks-tables': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('webhooks')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('url', 'text', (c) => c.notNull())
        .addColumn('events', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('secret', 'text', (c) => c.notNull())
        .addColumn('failure_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('last_delivery_at', 'bigint')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('webhooks_owner').on('webhooks').columns(['owner_id', 'id']).execute();
      await db.schema
        .createTable('webhook_deliveries')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('webhook_id', 'text', (c) => c.notNull().references('webhooks.id').onDelete('cascade'))
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('event', 'text', (c) => c.notNull())
        .addColumn('body', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('round_start', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'bigint')
        .addColumn('last_status_code', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('log', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('webhook_deliveries_hook')
        .on('webhook_deliveries')
        .columns(['webhook_id', 'id'])
        .execute();
      await db.schema
        .createIndex('webhook_deliveries_pending')
        .on('webhook_deliveries')
        .columns(['webhook_id', 'status'])
        .execute();
    },
  },
};

type Db = Kysely<Tables>;

/** Queries on the webhooks table; delivery bookkeeping lives in delivery-repo.ts. */
export class WebhooksRepo {
  constructor(readonly db: Db) {}

  insert(row: WebhookRow): Promise<unknown> {
    return this.db.insertInto('webhooks').values(row).execute();
  }

  get(ownerId: string, id: string): Promise<WebhookRow | undefined> {
    return this.db
      .selectFrom('webhooks')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('id', '=', id)
      .executeTakeFirst();
  }

  list(ownerId: string, workspaces?: readonly string[]): Promise<WebhookRow[]> {
    let q = this.db.selectFrom('webhooks').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return q.orderBy('id').execute();
  }

  async count(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('webhooks')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Subscriptions the fan-out needs: id, status and events of every webhook of an owner. */
  subscriptions(ownerId: string, db: Db = this.db) {
    return db
      .selectFrom('webhooks')
      .select(['id', 'status', 'events', 'workspace_id'])
      .where('owner_id', '=', ownerId)
      .execute();
  }

  async update(
    ownerId: string,
    id: string,
    set: Partial<Pick<WebhookRow, 'url' | 'events' | 'status' | 'failure_count' | 'updated_at'>>,
    db: Db = this.db,
  ): Promise<boolean> {
    const r = await db
      .updateTable('webhooks')
      .set(set)
      .where('owner_id', '=', ownerId)
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async delete(ownerId: string, id: string): Promise<boolean> {
    // Deliveries go first explicitly: PostgreSQL cascades, but SQLite only with foreign_keys on.
    return this.db.transaction().execute(async (trx) => {
      const hook = await trx
        .selectFrom('webhooks')
        .select('id')
        .where('owner_id', '=', ownerId)
        .where('id', '=', id)
        .executeTakeFirst();
      if (!hook) return false;
      await trx.deleteFrom('webhook_deliveries').where('webhook_id', '=', id).execute();
      await trx.deleteFrom('webhooks').where('id', '=', id).execute();
      return true;
    });
  }
}

export const webhookWorkspaceMigrations: Record<string, Migration> = {
  '0274-webhooks-workspace': workspaceColumnMigration('webhooks', 'owner_id'),
};
