import type { Kysely, Migration } from 'kysely';

/** One row per nube process that holds local state (sandboxes, user databases, templates). */
export interface NodesTable {
  id: string;
  /** Base URL other replicas reach this node at (forwarded requests). */
  address: string;
  /** `active`, `cordoned` (no new resources) or `draining` (no new resources; its resources are to move). */
  state: string;
  cores: number;
  memory_bytes: number;
  sandboxes: number;
  databases: number;
  /** JSON array of template names built on this node. */
  templates: string;
  driver: string;
  version: string;
  started_at: number;
  /** Epoch ms of the last heartbeat, by the node's own clock. */
  heartbeat_at: number;
}

declare module '../store/schema.js' {
  interface Tables {
    nodes: NodesTable;
  }
}

export const nodesMigrations: Record<string, Migration> = {
  '0120-platform-nodes': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('nodes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('address', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull().defaultTo('active'))
        .addColumn('cores', 'integer', (c) => c.notNull())
        .addColumn('memory_bytes', 'bigint', (c) => c.notNull())
        .addColumn('sandboxes', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('databases', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('templates', 'text', (c) => c.notNull().defaultTo('[]'))
        .addColumn('driver', 'text', (c) => c.notNull())
        .addColumn('version', 'text', (c) => c.notNull())
        .addColumn('started_at', 'bigint', (c) => c.notNull())
        .addColumn('heartbeat_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
};
