// Sandboxes on many nodes: the node column, what this node reports holding, where a new sandbox goes
// (the platform's scheduler, fed with this area's rows) and how a request finds its sandbox's node.
import type { Kysely, Migration } from 'kysely';
import type { Locator } from '../../platform/node-forward.js';
import { errors } from '../../platform/errors.js';
import { ElsewhereError } from '../../platform/nodes.js';
import type { Tables } from '../../store/schema.js';
import type { PlatformDeps } from '../deps.js';
import type { SandboxRuntime } from './runtime/driver.js';

export const sandboxNodeMigrations: Record<string, Migration> = {
  '0121-sandboxes-node': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('node_id', 'text').execute();
      await db.schema.createIndex('sandboxes_node').on('sandboxes').column('node_id').execute();
    },
  },
  '0122-sandbox-templates-node': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandbox_templates').addColumn('node_id', 'text').execute();
    },
  },
};

const BUILT_INS = ['base', 'code-interpreter'];
/** Sandboxes never move between nodes: a located id stays valid this long (bounded memory). */
const LOCATE_CACHE = 10_000;

export class SandboxPlacement {
  private readonly cache = new Map<string, string | null>();

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly deps: PlatformDeps,
  ) {}

  get here(): string {
    return this.deps.nodes.id;
  }

  /**
   * The node a new sandbox of this owner and template goes to: this one, or an ElsewhereError that
   * the REST layer turns into a relay of the create to the chosen node.
   */
  async place(ownerId: string, template: string): Promise<string> {
    const node = await this.choose(ownerId, template);
    if (node !== this.here) throw new ElsewhereError(node);
    return node;
  }

  /** The node the scheduler picks for a new sandbox (this one while pinned); nothing thrown, nothing relayed. */
  async choose(ownerId: string, template: string): Promise<string> {
    const counts = await this.db
      .selectFrom('sandboxes')
      .select((eb) => ['node_id', eb.fn.countAll<number>().as('n')])
      .where('owner_id', '=', ownerId)
      .groupBy('node_id')
      .execute();
    const ownerCounts = Object.fromEntries(counts.filter((r) => r.node_id).map((r) => [r.node_id as string, Number(r.n)]));
    return this.deps.nodes.place({ kind: 'sandbox', template, ownerCounts });
  }

  /**
   * A sandbox that starts from bytes one node holds (a derived template's snapshot) goes to that node
   * (affinity, not a copy: the snapshot is a layer over that node's build of the base template).
   * This node, ElsewhereError (relay), or 503 when that node is down, cordoned or draining.
   */
  async placeAt(nodeId: string | null, what: string): Promise<string> {
    if (!nodeId) return this.here;
    const node = await this.deps.nodes.get(nodeId);
    if (!node || node.status === 'down') throw errors.unavailable(`the node holding this ${what} (${nodeId}) is down; retry later`, 30);
    if (node.state !== 'active') {
      throw errors.unavailable(`the node holding this ${what} (${nodeId}) is ${node.state}: it takes no new sandbox; take a new ${what} elsewhere`, 60);
    }
    if (nodeId !== this.here) throw new ElsewhereError(nodeId);
    return nodeId;
  }

  /** Throws ElsewhereError (relay) when the sandbox is held by another node, 503 when that node is down. */
  async assertHere(nodeId: string | null): Promise<void> {
    const other = await this.deps.nodes.route(nodeId, 'sandbox');
    if (other) throw new ElsewhereError(other);
  }

  /** Why a sandbox is lost (its node is down or gone), or null while its node is up (or it is here). */
  lostReason(nodeId: string | null): Promise<string | null> {
    return this.deps.nodes.lostReason(nodeId);
  }

  async nodeOf(id: string): Promise<string | null | undefined> {
    if (this.cache.has(id)) return this.cache.get(id);
    const r = await this.db.selectFrom('sandboxes').select('node_id').where('id', '=', id).executeTakeFirst();
    if (!r) return undefined;
    if (this.cache.size >= LOCATE_CACHE) this.cache.clear();
    this.cache.set(id, r.node_id);
    return r.node_id;
  }

  /** Rows from before nodes existed belong to the node whose data directory holds their sandboxes. */
  async claimUnplaced(): Promise<void> {
    await this.db.updateTable('sandboxes').set({ node_id: this.here }).where('node_id', 'is', null).execute();
  }

  /** `/api/v2/sandboxes/<id>...`, the sandbox's port host names, and derived templates by id. */
  locators(portMatch: (host: string | undefined) => { id: string } | null, templateNodeOf: (id: string) => Promise<string | null | undefined>): Locator[] {
    const path = /^\/api\/v2\/sandboxes\/(sbx_[A-Za-z0-9]+)/;
    const template = /^\/api\/v2\/template-snapshots\/(tpl_[A-Za-z0-9]+)/;
    return [
      { what: 'derived template', match: (p) => template.exec(p)?.[1], locate: templateNodeOf },
      { what: 'sandbox', match: (_p, host) => portMatch(host)?.id, locate: (id) => this.nodeOf(id) },
      { what: 'sandbox', match: (p) => path.exec(p)?.[1], locate: (id) => this.nodeOf(id) },
    ];
  }

  /** What this node holds, for its heartbeat: sandboxes and the built-in templates built here. */
  reportTo(runtime: SandboxRuntime): void {
    this.deps.nodes.report(async () => {
      const r = await this.db
        .selectFrom('sandboxes')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('node_id', '=', this.here)
        .executeTakeFirstOrThrow();
      const templates: string[] = [];
      for (const name of BUILT_INS) if (await runtime.findTemplate(name).catch(() => null)) templates.push(name);
      return { sandboxes: Number(r.n), templates };
    });
  }
}
