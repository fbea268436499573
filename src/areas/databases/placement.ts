// User databases on many nodes: each database's file lives on one node (the node column); a new one is
// placed by the platform's scheduler, and requests for it are forwarded to its node.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Kysely, Migration } from 'kysely';
import type { Locator } from '../../platform/node-forward.js';
import { errors } from '../../platform/errors.js';
import { ElsewhereError, type NodeRegistry } from '../../platform/nodes.js';
import type { Tables } from '../../store/schema.js';

export const databaseNodeMigrations: Record<string, Migration> = {
  '0121-databases-node': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('databases').addColumn('node_id', 'text').execute();
      await db.schema.createIndex('databases_node').on('databases').column('node_id').execute();
    },
  },
};

/**
 * A located database is trusted this long: databases move (drain, restore after a node's death), so the
 * cache is short; the node that moves one updates its own entry at once, and a node that forwards a
 * request to the old holder is relayed on from there (one more hop).
 */
const LOCATE_TTL_MS = 2000;

export class DatabasePlacement {
  private readonly cache = new Map<string, { node: string | null; until: number }>();

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly nodes: NodeRegistry,
  ) {}

  get here(): string {
    return this.nodes.id;
  }

  /** This node, or ElsewhereError: the REST layer relays the create to the node the scheduler chose. */
  async place(ownerId: string): Promise<string> {
    const counts = await this.db
      .selectFrom('databases')
      .select((eb) => ['node_id', eb.fn.countAll<number>().as('n')])
      .where('owner_id', '=', ownerId)
      .groupBy('node_id')
      .execute();
    const ownerCounts = Object.fromEntries(counts.filter((r) => r.node_id).map((r) => [r.node_id as string, Number(r.n)]));
    const node = await this.nodes.place({ kind: 'database', ownerCounts });
    if (node !== this.here) throw new ElsewhereError(node);
    return node;
  }

  /** Throws ElsewhereError (or 503 while its node is down) unless the row's node is this one. */
  async assertHere(nodeId: string | null, id?: string): Promise<void> {
    // What the row says is newer than the cache: forwarding follows it from now on.
    if (id !== undefined) this.remember(id, nodeId);
    const other = await this.nodes.route(nodeId, 'database');
    if (other) throw new ElsewhereError(other);
  }

  /**
   * 503 when this node cannot be sure it still holds its databases: its heartbeats have not reached the
   * store for nearly the down-after time, so other nodes may already restore them elsewhere. Alone (no
   * other node known) nobody can, and it serves.
   */
  assertServing(): void {
    if (this.nodes.solo || this.nodes.selfUp) return;
    throw errors.unavailable('this node has lost contact with the cluster; its databases may be served by another node', 5);
  }

  /** The database now lives on `nodeId` (this node moved it there). */
  moved(id: string, nodeId: string): void {
    this.remember(id, nodeId);
  }

  private remember(id: string, node: string | null): void {
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(id, { node, until: Date.now() + LOCATE_TTL_MS });
  }

  async nodeOf(id: string): Promise<string | null | undefined> {
    const now = Date.now();
    const hit = this.cache.get(id);
    if (hit && hit.until > now) return hit.node;
    const r = await this.db.selectFrom('databases').select('node_id').where('id', '=', id).executeTakeFirst();
    if (!r) return undefined;
    this.remember(id, r.node_id);
    return r.node_id;
  }

  locator(): Locator {
    // The REST routes and the libSQL (Hrana) endpoint of a database.
    const path = /^\/(?:api\/v2\/databases|libsql)\/(db_[A-Za-z0-9]+)/;
    return { what: 'database', match: (p) => path.exec(p)?.[1], locate: (id) => this.nodeOf(id) };
  }

  /** Rows from before nodes existed: the node whose disk has their files takes them. */
  async claimUnplaced(dir: string): Promise<void> {
    const rows = await this.db.selectFrom('databases').select('id').where('node_id', 'is', null).execute();
    const mine = rows.filter((r) => existsSync(join(dir, `${r.id}.sqlite`))).map((r) => r.id);
    if (mine.length) await this.db.updateTable('databases').set({ node_id: this.here }).where('id', 'in', mine).execute();
  }

  report(): void {
    this.nodes.report(async () => {
      const r = await this.db
        .selectFrom('databases')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('node_id', '=', this.here)
        .executeTakeFirstOrThrow();
      return { databases: Number(r.n) };
    });
  }
}
