import type { Kysely, Migration, Selectable, ColumnType, Insertable } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

export type AgentStatus = 'building' | 'running' | 'lost';
export type TurnStatus = 'queued' | 'running' | 'done' | 'failed';

interface AgentsTable {
  id: string;
  owner_id: string;
  name: string | null;
  template: string;
  status: AgentStatus;
  /** The sandbox (an ordinary sandbox of the owner) the agent runs in; null until built. */
  sandbox_id: string | null;
  /** The embed token's SHA-256 (first 16 hex characters index it); the token itself is shown once. */
  embed_lookup: string;
  embed_hash: string;
  /** Sealed JSON: the user's env, the MCP servers (headers and env may hold secrets), the connection token. */
  secrets_sealed: string;
  /** JSON array of { name, contentBase64 }: written again into a revived agent's fresh workspace. */
  seed_files: string;
  timeout_seconds: number;
  error: string | null;
  default_session_id: string | null;
  /** The node holding the agent's sandbox (and the ACP connection to it); null on rows from before nodes. */
  node_id: string | null;
  created_at: number;
  updated_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: ColumnType<string, string | undefined, string>;
}

interface AgentSessionsTable {
  id: string;
  agent_id: string;
  owner_id: string;
  /** The agent program's ACP session id; null after a revive (fresh disk: the next turn opens a new one). */
  acp_session_id: string | null;
  /**
   * Who opened it: `owner`, or `embed` (an embed token: a page's visitor). An embed caller continues
   * only sessions embed callers opened, never the owner's.
   */
  holder: 'owner' | 'embed';
  created_at: number;
}

interface AgentTurnsTable {
  id: string;
  agent_id: string;
  session_id: string;
  owner_id: string;
  status: TurnStatus;
  input: string;
  output: string;
  error_code: string | null;
  error_message: string | null;
  /** JSON { model, inputTokens, outputTokens, toolCalls } once known. */
  usage: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  /** The scoped key (with caps) that started the turn: the gateway counts its tokens toward that key. */
  key_id: string | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    agents: AgentsTable;
    agent_sessions: AgentSessionsTable;
    agent_turns: AgentTurnsTable;
  }
}

export type AgentRow = Selectable<AgentsTable>;
export type SessionRow = Selectable<AgentSessionsTable>;
export type TurnRow = Selectable<AgentTurnsTable>;

export const agentsMigrations: Record<string, Migration> = {
  '0262-agent-turns-key': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('agent_turns').addColumn('key_id', 'text').execute();
      await db.schema.createIndex('agent_turns_agent_status').on('agent_turns').columns(['agent_id', 'status']).execute();
    },
  },
  '0200-agents-session-holder': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('agent_sessions').addColumn('holder', 'text', (c) => c.notNull().defaultTo('owner')).execute();
    },
  },
  '0122-agents-node': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('agents').addColumn('node_id', 'text').execute();
      await db.schema.createIndex('agents_node').on('agents').column('node_id').execute();
    },
  },
  '0009-agents-tables': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('agents')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('template', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text')
        .addColumn('embed_lookup', 'text', (c) => c.notNull())
        .addColumn('embed_hash', 'text', (c) => c.notNull())
        .addColumn('secrets_sealed', 'text', (c) => c.notNull())
        .addColumn('seed_files', 'text', (c) => c.notNull())
        .addColumn('timeout_seconds', 'integer', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('default_session_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('agents_owner').on('agents').column('owner_id').execute();
      await db.schema.createIndex('agents_embed').on('agents').column('embed_lookup').execute();
      await db.schema
        .createTable('agent_sessions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('agent_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('acp_session_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('agent_sessions_agent').on('agent_sessions').column('agent_id').execute();
      await db.schema
        .createTable('agent_turns')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('agent_id', 'text', (c) => c.notNull())
        .addColumn('session_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('input', 'text', (c) => c.notNull())
        .addColumn('output', 'text', (c) => c.notNull())
        .addColumn('error_code', 'text')
        .addColumn('error_message', 'text')
        .addColumn('usage', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('started_at', 'bigint')
        .addColumn('finished_at', 'bigint')
        .execute();
      await db.schema.createIndex('agent_turns_session').on('agent_turns').columns(['session_id', 'created_at']).execute();
    },
  },
};

export class AgentsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  insert(row: Insertable<AgentsTable>) {
    return this.db.insertInto('agents').values(row).execute();
  }
  get(id: string) {
    return this.db.selectFrom('agents').selectAll().where('id', '=', id).executeTakeFirst();
  }
  list(ownerId: string, workspaces?: readonly string[]) {
    let q = this.db.selectFrom('agents').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return q.orderBy('id').execute();
  }
  /** The owner's agent whose box `sandboxId` is (by the owner's agents: few, and indexed by owner). */
  async bySandbox(ownerId: string, sandboxId: string): Promise<string | undefined> {
    const r = await this.db.selectFrom('agents').select('id').where('owner_id', '=', ownerId).where('sandbox_id', '=', sandboxId).executeTakeFirst();
    return r?.id;
  }
  /** The agents held by `nodeId` (and those from before nodes). */
  onNode(nodeId: string) {
    return this.db
      .selectFrom('agents')
      .selectAll()
      .where((eb) => eb.or([eb('node_id', '=', nodeId), eb('node_id', 'is', null)]))
      .execute();
  }
  async nodeOf(id: string): Promise<string | null | undefined> {
    const r = await this.db.selectFrom('agents').select('node_id').where('id', '=', id).executeTakeFirst();
    return r ? r.node_id : undefined;
  }
  async count(ownerId: string): Promise<number> {
    const r = await this.db.selectFrom('agents').select((eb) => eb.fn.countAll<number>().as('n')).where('owner_id', '=', ownerId).executeTakeFirst();
    return Number(r?.n ?? 0);
  }
  byEmbedLookup(lookup: string) {
    return this.db.selectFrom('agents').selectAll().where('embed_lookup', '=', lookup).execute();
  }
  async update(id: string, patch: Partial<AgentRow>): Promise<void> {
    await this.db.updateTable('agents').set({ ...patch, updated_at: Date.now() }).where('id', '=', id).execute();
  }
  async delete(id: string): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await tx.deleteFrom('agent_turns').where('agent_id', '=', id).execute();
      await tx.deleteFrom('agent_sessions').where('agent_id', '=', id).execute();
      await tx.deleteFrom('agents').where('id', '=', id).execute();
    });
  }

  insertSession(row: SessionRow) {
    return this.db.insertInto('agent_sessions').values(row).execute();
  }
  session(id: string) {
    return this.db.selectFrom('agent_sessions').selectAll().where('id', '=', id).executeTakeFirst();
  }
  async setAcpSession(id: string, acp: string | null): Promise<void> {
    await this.db.updateTable('agent_sessions').set({ acp_session_id: acp }).where('id', '=', id).execute();
  }
  async forgetAcpSessions(agentId: string): Promise<void> {
    await this.db.updateTable('agent_sessions').set({ acp_session_id: null }).where('agent_id', '=', agentId).execute();
  }

  insertTurn(row: TurnRow) {
    return this.db.insertInto('agent_turns').values(row).execute();
  }
  async updateTurn(id: string, patch: Partial<TurnRow>): Promise<void> {
    await this.db.updateTable('agent_turns').set(patch).where('id', '=', id).execute();
  }
  /** Keys whose turns run on this agent now (the gateway meters its completions toward them). */
  async runningTurnKeys(agentId: string): Promise<string[]> {
    const rows = await this.db
      .selectFrom('agent_turns')
      .select('key_id')
      .distinct()
      .where('agent_id', '=', agentId)
      .where('status', '=', 'running')
      .where('key_id', 'is not', null)
      .execute();
    return rows.map((r) => r.key_id!);
  }
  turns(agentId: string, sessionId?: string, limit = 100) {
    let q = this.db.selectFrom('agent_turns').selectAll().where('agent_id', '=', agentId);
    if (sessionId) q = q.where('session_id', '=', sessionId);
    return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
  }
  /**
   * At start: the turns this node was running when it stopped (other nodes' turns run on) cannot finish
   * (their connection is gone). What they had produced (written as it streamed) is kept.
   */
  async failInterrupted(now: number, nodeId: string, interrupted: { code: string; message: string }): Promise<void> {
    await this.db
      .updateTable('agent_turns')
      .set({ status: 'failed', error_code: interrupted.code, error_message: interrupted.message, finished_at: now })
      .where('status', 'in', ['queued', 'running'])
      .where('agent_id', 'in', (eb) =>
        eb
          .selectFrom('agents')
          .select('id')
          .where((w) => w.or([w('node_id', '=', nodeId), w('node_id', 'is', null)])),
      )
      .execute();
  }
}

export const agentWorkspaceMigrations: Record<string, Migration> = {
  '0277-agents-workspace': workspaceColumnMigration('agents', 'owner_id'),
};
