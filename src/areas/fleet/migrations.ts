import type { Kysely, Migration } from 'kysely';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

export const fleetMigrations: Record<string, Migration> = {
  '0010-fleet-tables': {
    async up(db: Kysely<unknown>) {
      const s = db.schema;
      await s
        .createTable('fleet_agents')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('model', 'text')
        .addColumn('instructions', 'text', (c) => c.notNull())
        .addColumn('channels', 'text', (c) => c.notNull())
        .addColumn('capacity', 'integer', (c) => c.notNull())
        .addColumn('config_group_ids', 'text', (c) => c.notNull())
        .addColumn('token_lookup', 'text', (c) => c.notNull())
        .addColumn('token_hash', 'text', (c) => c.notNull())
        .addColumn('token_sealed', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await s.createIndex('fleet_agents_owner').on('fleet_agents').column('owner_id').execute();
      await s.createIndex('fleet_agents_token').on('fleet_agents').column('token_lookup').execute();
      await s
        .createTable('fleet_config_groups')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('prompt', 'text', (c) => c.notNull())
        .addColumn('mcp_sealed', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await s.createIndex('fleet_config_groups_owner').on('fleet_config_groups').column('owner_id').execute();
      await s
        .createTable('fleet_client_credentials')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('lookup', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await s.createIndex('fleet_client_credentials_lookup').on('fleet_client_credentials').column('lookup').execute();
      await s
        .createTable('fleet_conversations')
        .addColumn('fleet_agent_id', 'text', (c) => c.notNull())
        .addColumn('group_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('session_uuid', 'text', (c) => c.notNull())
        .addColumn('box_id', 'text')
        .addColumn('agent_session_id', 'text')
        .addColumn('last_seq', 'bigint', (c) => c.notNull())
        .addColumn('first_seq', 'bigint', (c) => c.notNull())
        .addColumn('reset_seq', 'bigint')
        .addColumn('reset_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('fleet_conversations_pk', ['fleet_agent_id', 'group_id'])
        .execute();
      await s
        .createTable('fleet_messages')
        .addColumn('fleet_agent_id', 'text', (c) => c.notNull())
        .addColumn('group_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .addColumn('id', 'text', (c) => c.notNull())
        .addColumn('role', 'text', (c) => c.notNull())
        .addColumn('text', 'text', (c) => c.notNull())
        .addColumn('turn_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('fleet_messages_pk', ['fleet_agent_id', 'group_id', 'seq'])
        .execute();
      await s.createIndex('fleet_messages_turn').on('fleet_messages').column('turn_id').execute();
      await s
        .createTable('fleet_turns')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('fleet_agent_id', 'text', (c) => c.notNull())
        .addColumn('group_id', 'text', (c) => c.notNull())
        .addColumn('config_group_id', 'text')
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('input', 'text', (c) => c.notNull())
        .addColumn('sender_name', 'text')
        .addColumn('reply', 'text')
        .addColumn('error_code', 'text')
        .addColumn('error_message', 'text')
        .addColumn('usage', 'text')
        .addColumn('memory_reset', 'integer', (c) => c.notNull())
        .addColumn('emitted', 'integer', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('started_at', 'bigint')
        .addColumn('finished_at', 'bigint')
        .execute();
      await s.createIndex('fleet_turns_status').on('fleet_turns').columns(['status', 'created_at']).execute();
      await s.createIndex('fleet_turns_agent').on('fleet_turns').column('fleet_agent_id').execute();
      await s
        .createTable('fleet_boxes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('fleet_agent_id', 'text', (c) => c.notNull())
        .addColumn('agent_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('last_used_at', 'bigint', (c) => c.notNull())
        .execute();
      await s.createIndex('fleet_boxes_agent').on('fleet_boxes').column('fleet_agent_id').execute();
    },
  },
};

fleetMigrations['0011-fleet-telegram'] = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('fleet_agents').addColumn('telegram_sealed', 'text').execute();
  },
};

fleetMigrations['0122-fleet-node'] = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('fleet_agents').addColumn('node_id', 'text').execute();
  },
};

fleetMigrations['0012-fleet-turn-external-id'] = {
  async up(db: Kysely<unknown>) {
    // A channel's own id of the message (Telegram's update_id): a redelivered update is not a second turn.
    await db.schema.alterTable('fleet_turns').addColumn('external_id', 'text').execute();
    await db.schema.createIndex('fleet_turns_external').on('fleet_turns').columns(['fleet_agent_id', 'external_id']).unique().execute();
  },
};

fleetMigrations['0200-fleet-box-conversation'] = {
  async up(db: Kysely<unknown>) {
    // A box serves one conversation (null: a spare). Boxes from before served several at once: marked ''
    // here, they are destroyed at the next start and their conversations move to boxes of their own.
    await db.schema.alterTable('fleet_boxes').addColumn('group_id', 'text').execute();
    await db.updateTable('fleet_boxes' as never).set({ group_id: '' } as never).execute();
  },
};

fleetMigrations['0201-fleet-broadcasts'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('fleet_broadcasts')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('owner_id', 'text', (c) => c.notNull())
      .addColumn('fleet_agent_id', 'text', (c) => c.notNull())
      .addColumn('text', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('total', 'integer', (c) => c.notNull())
      .addColumn('sent', 'integer', (c) => c.notNull())
      .addColumn('failed', 'integer', (c) => c.notNull())
      .addColumn('cursor', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('finished_at', 'bigint')
      .execute();
    await db.schema.createIndex('fleet_broadcasts_agent').on('fleet_broadcasts').columns(['fleet_agent_id', 'created_at']).execute();
  },
};

export const fleetWorkspaceMigrations: Record<string, Migration> = {
  '0279-fleet-agents-workspace': workspaceColumnMigration('fleet_agents', 'owner_id'),
};
