// User databases on many nodes: each database's file lives on one node (the node column); a new one is
// placed by the platform's scheduler, and requests for it are forwarded to its node.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Kysely, Migration } from 'kysely';
import type { Locator } from '../../platform/node-forward.js';
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

/** A located database is trusted this long: a drain (later) moves databases, so the cache is short. */
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

  async assertHere(nodeId: string | null): Promise<void> {
    const other = await this.nodes.route(nodeId, 'database');
    if (other) throw new ElsewhereError(other);
  }

  async nodeOf(id: string): Promise<string | null | undefined> {
    const now = Date.now();
    const hit = this.cache.get(id);
    if (hit && hit.until > now) return hit.node;
    const r = await this.db.selectFrom('databases').select('node_id').where('id', '=', id).executeTakeFirst();
    if (!r) return undefined;
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(id, { node: r.node_id, until: now + LOCATE_TTL_MS });
    return r.node_id;
  }

  locator(): Locator {
    const path = /^\/api\/v2\/databases\/(db_[A-Za-z0-9]+)/;
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
