import type { Kysely, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';

export type FleetTurnStatus = 'queued' | 'running' | 'completed' | 'failed';

interface FleetAgentsTable {
  id: string;
  owner_id: string;
  name: string;
  /** The model asked for; the LLM gateway's upstream decides the one used (reported in usage.model). */
  model: string | null;
  instructions: string;
  /** JSON array of channel names. */
  channels: string;
  /** Most boxes this fleet agent grows to. */
  capacity: number;
  /** JSON array of config group ids it accepts (empty: any of the owner's). */
  config_group_ids: string;
  /** The MESSAGE token: SHA-256 (first 16 hex index it) and sealed (GET /fleet-agents shows it). */
  token_lookup: string;
  token_hash: string;
  token_sealed: string;
  /** Sealed JSON { botToken, secret } of the Telegram channel; null when not connected. */
  telegram_sealed: string | null;
  /** The node running its pool (its boxes are agents there); null on rows from before nodes. */
  node_id: string | null;
  created_at: number;
  updated_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

interface FleetConfigGroupsTable {
  id: string;
  owner_id: string;
  name: string;
  prompt: string;
  /** Sealed JSON array of MCP connectors (headers and env may hold secrets). */
  mcp_sealed: string;
  created_at: number;
  updated_at: number;
}

interface FleetClientCredentialsTable {
  id: string;
  owner_id: string;
  name: string | null;
  lookup: string;
  hash: string;
  created_at: number;
}

interface FleetConversationsTable {
  fleet_agent_id: string;
  group_id: string;
  owner_id: string;
  /** Stable id of the conversation for receivers (`sessionUuid` in turn events). */
  session_uuid: string;
  /** The box (fleet_boxes.id) serving it, and its agent session there; null: none (moves on next turn). */
  box_id: string | null;
  agent_session_id: string | null;
  /** Sequence of the last message (0: none). */
  last_seq: number;
  /** Lowest sequence still kept (trimming raises it). */
  first_seq: number;
  /** The model started blank at this sequence (box lost without backup): reset_at is when. */
  reset_seq: number | null;
  reset_at: number | null;
  created_at: number;
  updated_at: number;
}

interface FleetMessagesTable {
  fleet_agent_id: string;
  group_id: string;
  seq: number;
  id: string;
  role: 'user' | 'assistant' | 'tool';
  text: string;
  turn_id: string | null;
  created_at: number;
}

interface FleetTurnsTable {
  id: string;
  owner_id: string;
  fleet_agent_id: string;
  group_id: string;
  config_group_id: string | null;
  status: FleetTurnStatus;
  input: string;
  sender_name: string | null;
  reply: string | null;
  error_code: string | null;
  error_message: string | null;
  /** JSON { model, inputTokens, outputTokens, toolCalls }. */
  usage: string | null;
  memory_reset: number;
  /** A channel's id of the message (`tg:<update_id>`), null for the API. */
  external_id: string | null;
  /** Set once the outcome event was published (exactly one per turn). */
  emitted: number;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
}

interface FleetBoxesTable {
  id: string;
  owner_id: string;
  fleet_agent_id: string;
  /** The agent (agents area) the box is. */
  agent_id: string;
  /**
   * The one conversation it serves, bound before any turn of it runs there; null: a spare; '': a box
   * from before boxes were per conversation (destroyed at start).
   */
  group_id: string | null;
  created_at: number;
  last_used_at: number;
}

interface FleetBroadcastsTable {
  id: string;
  owner_id: string;
  fleet_agent_id: string;
  text: string;
  status: 'sending' | 'sent';
  /** Conversations it was for when created, and how many got it so far or failed. */
  total: number;
  sent: number;
  failed: number;
  /** The last conversation (group id) done: the job goes on after it. */
  cursor: string;
  created_at: number;
  finished_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    fleet_broadcasts: FleetBroadcastsTable;
    fleet_agents: FleetAgentsTable;
    fleet_config_groups: FleetConfigGroupsTable;
    fleet_client_credentials: FleetClientCredentialsTable;
    fleet_conversations: FleetConversationsTable;
    fleet_messages: FleetMessagesTable;
    fleet_turns: FleetTurnsTable;
    fleet_boxes: FleetBoxesTable;
  }
}

export type FleetAgentRow = Selectable<FleetAgentsTable>;
export type ConfigGroupRow = Selectable<FleetConfigGroupsTable>;
export type ClientCredentialRow = Selectable<FleetClientCredentialsTable>;
export type ConversationRow = Selectable<FleetConversationsTable>;
export type MessageRow = Selectable<FleetMessagesTable>;
export type FleetTurnRow = Selectable<FleetTurnsTable>;
export type BoxRow = Selectable<FleetBoxesTable>;
export type BroadcastRow = Selectable<FleetBroadcastsTable>;

/** The channels a broadcast reaches. */
export interface Reach {
  web: boolean;
  telegram: boolean;
}

const n = (v: unknown) => Number(v ?? 0);

/** A conversation's row before its first message. */
export function newConversation(fleet: Pick<FleetAgentRow, 'id' | 'owner_id'>, groupId: string, now = Date.now()): ConversationRow {
  return {
    fleet_agent_id: fleet.id,
    group_id: groupId,
    owner_id: fleet.owner_id,
    session_uuid: crypto.randomUUID(),
    box_id: null,
    agent_session_id: null,
    last_seq: 0,
    first_seq: 1,
    reset_seq: null,
    reset_at: null,
    created_at: now,
    updated_at: now,
  };
}

export class FleetRepo {
  constructor(readonly db: Kysely<Tables>) {}

  // fleet agents
  insertAgent(row: FleetAgentRow) {
    return this.db.insertInto('fleet_agents').values(row).execute();
  }
  agent(id: string) {
    return this.db.selectFrom('fleet_agents').selectAll().where('id', '=', id).executeTakeFirst();
  }
  /** The fleet agents whose pool this node runs (and those from before nodes). */
  agentIdsOn(nodeId: string): Promise<string[]> {
    return this.db
      .selectFrom('fleet_agents')
      .select('id')
      .where((eb) => eb.or([eb('node_id', '=', nodeId), eb('node_id', 'is', null)]))
      .execute()
      .then((rows) => rows.map((r) => r.id));
  }
  async nodeOf(id: string): Promise<string | null | undefined> {
    const r = await this.db.selectFrom('fleet_agents').select('node_id').where('id', '=', id).executeTakeFirst();
    return r ? r.node_id : undefined;
  }
  /** Moves a fleet agent whose node is down (only if no other node moved it first); true when this call did. */
  async moveAgent(id: string, from: string | null, to: string): Promise<boolean> {
    const q = this.db.updateTable('fleet_agents').set({ node_id: to, updated_at: Date.now() }).where('id', '=', id);
    const r = await (from === null ? q.where('node_id', 'is', null) : q.where('node_id', '=', from)).executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }
  agents(ownerId: string, workspaces?: readonly string[]) {
    let q = this.db.selectFrom('fleet_agents').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return q.orderBy('id').execute();
  }
  agentsByToken(lookup: string) {
    return this.db.selectFrom('fleet_agents').selectAll().where('token_lookup', '=', lookup).execute();
  }
  async updateAgent(id: string, patch: Partial<FleetAgentRow>): Promise<void> {
    await this.db.updateTable('fleet_agents').set({ ...patch, updated_at: Date.now() }).where('id', '=', id).execute();
  }
  async deleteAgent(id: string): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await tx.deleteFrom('fleet_messages').where('fleet_agent_id', '=', id).execute();
      await tx.deleteFrom('fleet_conversations').where('fleet_agent_id', '=', id).execute();
      await tx.deleteFrom('fleet_turns').where('fleet_agent_id', '=', id).execute();
      await tx.deleteFrom('fleet_boxes').where('fleet_agent_id', '=', id).execute();
      await tx.deleteFrom('fleet_broadcasts').where('fleet_agent_id', '=', id).execute();
      await tx.deleteFrom('fleet_agents').where('id', '=', id).execute();
    });
  }

  // broadcasts
  /** The row and its job (`enqueue` runs in the same transaction): both or neither. */
  async insertBroadcast(row: BroadcastRow, enqueue: (db: Kysely<Tables>) => Promise<unknown>): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await tx.insertInto('fleet_broadcasts').values(row).execute();
      await enqueue(tx);
    });
  }
  broadcast(id: string) {
    return this.db.selectFrom('fleet_broadcasts').selectAll().where('id', '=', id).executeTakeFirst();
  }
  broadcasts(fleetAgentId: string) {
    return this.db.selectFrom('fleet_broadcasts').selectAll().where('fleet_agent_id', '=', fleetAgentId).orderBy('created_at', 'desc').limit(100).execute();
  }
  async updateBroadcast(id: string, patch: Partial<BroadcastRow>, db: Kysely<Tables> = this.db): Promise<void> {
    await db.updateTable('fleet_broadcasts').set(patch).where('id', '=', id).execute();
  }
  private recipientsQuery(fleetAgentId: string, reach: Reach) {
    const prefixes = [...(reach.web ? ['web-%'] : []), ...(reach.telegram ? ['tg-%'] : [])];
    return this.db
      .selectFrom('fleet_conversations')
      .where('fleet_agent_id', '=', fleetAgentId)
      .where((w) => (prefixes.length ? w.or(prefixes.map((pre) => w('group_id', 'like', pre))) : w.val(false)));
  }
  async countRecipients(fleetAgentId: string, reach: Reach): Promise<number> {
    const r = await this.recipientsQuery(fleetAgentId, reach).select((e) => e.fn.countAll().as('n')).executeTakeFirst();
    return n(r?.n);
  }
  /** Conversations after `after` in group id order (a broadcast's next page). */
  async recipients(fleetAgentId: string, reach: Reach, after: string, limit: number): Promise<string[]> {
    const rows = await this.recipientsQuery(fleetAgentId, reach).select('group_id').where('group_id', '>', after).orderBy('group_id').limit(limit).execute();
    return rows.map((r) => r.group_id);
  }
  async hasMessage(fleetAgentId: string, groupId: string, id: string): Promise<boolean> {
    const r = await this.db.selectFrom('fleet_messages').select('id').where('fleet_agent_id', '=', fleetAgentId).where('group_id', '=', groupId).where('id', '=', id).executeTakeFirst();
    return r !== undefined;
  }

  // config groups
  insertGroup(row: ConfigGroupRow) {
    return this.db.insertInto('fleet_config_groups').values(row).execute();
  }
  group(id: string) {
    return this.db.selectFrom('fleet_config_groups').selectAll().where('id', '=', id).executeTakeFirst();
  }
  groups(ownerId: string) {
    return this.db.selectFrom('fleet_config_groups').selectAll().where('owner_id', '=', ownerId).orderBy('id').execute();
  }
  async updateGroup(id: string, patch: Partial<ConfigGroupRow>): Promise<void> {
    await this.db.updateTable('fleet_config_groups').set({ ...patch, updated_at: Date.now() }).where('id', '=', id).execute();
  }
  async deleteGroup(id: string): Promise<void> {
    await this.db.deleteFrom('fleet_config_groups').where('id', '=', id).execute();
  }

  // client credentials
  insertClient(row: ClientCredentialRow) {
    return this.db.insertInto('fleet_client_credentials').values(row).execute();
  }
  clients(ownerId: string) {
    return this.db.selectFrom('fleet_client_credentials').selectAll().where('owner_id', '=', ownerId).orderBy('id').execute();
  }
  clientsByLookup(lookup: string) {
    return this.db.selectFrom('fleet_client_credentials').selectAll().where('lookup', '=', lookup).execute();
  }
  async deleteClient(ownerId: string, id: string): Promise<number> {
    const r = await this.db.deleteFrom('fleet_client_credentials').where('id', '=', id).where('owner_id', '=', ownerId).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  // boxes
  insertBox(row: BoxRow) {
    return this.db.insertInto('fleet_boxes').values(row).execute();
  }
  boxes(fleetAgentId?: string) {
    let q = this.db.selectFrom('fleet_boxes').selectAll();
    if (fleetAgentId) q = q.where('fleet_agent_id', '=', fleetAgentId);
    return q.orderBy('created_at').execute();
  }
  async deleteBox(id: string): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      // Its conversations move to another box (with their transcript) on their next turn.
      await tx.updateTable('fleet_conversations').set({ box_id: null, agent_session_id: null }).where('box_id', '=', id).execute();
      await tx.deleteFrom('fleet_boxes').where('id', '=', id).execute();
    });
  }
  /** Binds a spare to its conversation; throws when it is no spare any more (gone, or bound already). */
  async bindBox(id: string, groupId: string): Promise<void> {
    const r = await this.db.updateTable('fleet_boxes').set({ group_id: groupId }).where('id', '=', id).where('group_id', 'is', null).executeTakeFirst();
    if (Number(r.numUpdatedRows) !== 1) throw new Error(`box ${id} is not a spare any more`);
  }
  async touchBox(id: string, at: number): Promise<void> {
    await this.db.updateTable('fleet_boxes').set({ last_used_at: at }).where('id', '=', id).execute();
  }

  // conversations and messages
  conversation(fleetAgentId: string, groupId: string) {
    return this.db
      .selectFrom('fleet_conversations')
      .selectAll()
      .where('fleet_agent_id', '=', fleetAgentId)
      .where('group_id', '=', groupId)
      .executeTakeFirst()
      .then((r) => r && { ...r, last_seq: n(r.last_seq), first_seq: n(r.first_seq), reset_seq: r.reset_seq === null ? null : n(r.reset_seq) });
  }
  async insertConversation(row: ConversationRow): Promise<void> {
    await this.db.insertInto('fleet_conversations').values(row).onConflict((oc) => oc.columns(['fleet_agent_id', 'group_id']).doNothing()).execute();
  }
  async updateConversation(fleetAgentId: string, groupId: string, patch: Partial<ConversationRow>): Promise<void> {
    await this.db
      .updateTable('fleet_conversations')
      .set({ ...patch, updated_at: Date.now() })
      .where('fleet_agent_id', '=', fleetAgentId)
      .where('group_id', '=', groupId)
      .execute();
  }

  /** Appends messages with the next sequences (one writer per conversation: the turn lock). */
  async append(fleetAgentId: string, groupId: string, items: Omit<MessageRow, 'seq' | 'fleet_agent_id' | 'group_id'>[]): Promise<number> {
    return this.db.transaction().execute(async (tx) => {
      const c = await tx
        .selectFrom('fleet_conversations')
        .select('last_seq')
        .where('fleet_agent_id', '=', fleetAgentId)
        .where('group_id', '=', groupId)
        .executeTakeFirstOrThrow();
      let seq = n(c.last_seq);
      for (const m of items) {
        seq += 1;
        await tx.insertInto('fleet_messages').values({ ...m, fleet_agent_id: fleetAgentId, group_id: groupId, seq }).execute();
      }
      await tx
        .updateTable('fleet_conversations')
        .set({ last_seq: seq, updated_at: Date.now() })
        .where('fleet_agent_id', '=', fleetAgentId)
        .where('group_id', '=', groupId)
        .execute();
      return seq;
    });
  }

  async messages(fleetAgentId: string, groupId: string, afterSeq: number, limit: number): Promise<MessageRow[]> {
    const rows = await this.db
      .selectFrom('fleet_messages')
      .selectAll()
      .where('fleet_agent_id', '=', fleetAgentId)
      .where('group_id', '=', groupId)
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ ...r, seq: n(r.seq), created_at: n(r.created_at) }));
  }

  /** The last `limit` messages, oldest first (the transcript carried to a new box). */
  /** The last `limit` messages before turn `exceptTurn`'s own (a replayed turn's message is already kept). */
  async tail(fleetAgentId: string, groupId: string, limit: number, exceptTurn: string): Promise<MessageRow[]> {
    const rows = await this.db
      .selectFrom('fleet_messages')
      .selectAll()
      .where('fleet_agent_id', '=', fleetAgentId)
      .where('group_id', '=', groupId)
      .where((w) => w.or([w('turn_id', 'is', null), w('turn_id', '!=', exceptTurn)]))
      .orderBy('seq', 'desc')
      .limit(limit)
      .execute();
    return rows.reverse().map((r) => ({ ...r, seq: n(r.seq) }));
  }

  /** Drops messages older than `before` (ms) or beyond the newest `keep`; returns the new first_seq. */
  async trim(fleetAgentId: string, groupId: string, lastSeq: number, keep: number, before: number): Promise<number> {
    const q = this.db.deleteFrom('fleet_messages').where('fleet_agent_id', '=', fleetAgentId).where('group_id', '=', groupId);
    await q.where((eb) => eb.or([eb('seq', '<=', lastSeq - keep), eb('created_at', '<', before)])).execute();
    const first = await this.db
      .selectFrom('fleet_messages')
      .select((eb) => eb.fn.min<number>('seq').as('s'))
      .where('fleet_agent_id', '=', fleetAgentId)
      .where('group_id', '=', groupId)
      .executeTakeFirst();
    const firstSeq = first?.s === null || first?.s === undefined ? lastSeq + 1 : n(first.s);
    await this.updateConversation(fleetAgentId, groupId, { first_seq: firstSeq });
    return firstSeq;
  }

  async hasUserMessage(turnId: string): Promise<boolean> {
    const r = await this.db.selectFrom('fleet_messages').select('seq').where('turn_id', '=', turnId).where('role', '=', 'user').executeTakeFirst();
    return r !== undefined;
  }

  // turns
  insertTurn(row: FleetTurnRow) {
    return this.db.insertInto('fleet_turns').values(row).execute();
  }
  turn(id: string) {
    return this.db.selectFrom('fleet_turns').selectAll().where('id', '=', id).executeTakeFirst();
  }
  async updateTurn(id: string, patch: Partial<FleetTurnRow>): Promise<void> {
    await this.db.updateTable('fleet_turns').set(patch).where('id', '=', id).execute();
  }
  /** Marks the outcome published; false when it already was (exactly one outcome per turn). */
  async claimEmit(id: string, db: Kysely<Tables> = this.db): Promise<boolean> {
    const r = await db.updateTable('fleet_turns').set({ emitted: 1 }).where('id', '=', id).where('emitted', '=', 0).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }
  async hasExternal(fleetAgentId: string, externalId: string): Promise<boolean> {
    const r = await this.db.selectFrom('fleet_turns').select('id').where('fleet_agent_id', '=', fleetAgentId).where('external_id', '=', externalId).executeTakeFirst();
    return r !== undefined;
  }
  unfinished() {
    return this.db.selectFrom('fleet_turns').selectAll().where('status', 'in', ['queued', 'running']).orderBy('created_at').execute();
  }
  /** Finished turns whose event was not published (nube stopped in between). */
  unemitted() {
    return this.db.selectFrom('fleet_turns').selectAll().where('status', 'in', ['completed', 'failed']).where('emitted', '=', 0).execute();
  }
}
