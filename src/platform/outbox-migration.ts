import type { Kysely, Migration } from 'kysely';

export interface OutboxEventsTable {
  /** `evt_<time><random>`: drained in id order, so roughly in the order events happened. */
  id: string;
  owner_id: string;
  event: string;
  /** The event's object, JSON. */
  data: string;
  /** ISO time the event was recorded: the `timestamp` of the webhook body. */
  timestamp: string;
  created_at: number;
}

declare module '../store/schema.js' {
  interface Tables {
    outbox_events: OutboxEventsTable;
  }
}

export const outboxMigrations: Record<string, Migration> = {
  '0110-platform-outbox': {
    async up(db: Kysely<unknown>) {
      // Rows live from the commit of their change until the consumer's commit deletes them: the table
      // stays small, and the primary key is the only index the drain needs.
      await db.schema
        .createTable('outbox_events')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('event', 'text', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('timestamp', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};
