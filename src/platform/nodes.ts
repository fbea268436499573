// The node registry: every nube process that holds local state (sandboxes, user databases, templates)
// registers here with a heartbeat; API-only replicas do not. Placement reads it, forwarding routes by
// it, and `nube nodes` lists, cordons and drains its rows. Platform code: it imports no area; areas
// report what they hold through `report()`.
import { AsyncLocalStorage } from 'node:async_hooks';
import { cpus, totalmem } from 'node:os';
import type { Kysely } from 'kysely';
import type { Tables } from '../store/schema.js';
import type { NodesConfig } from './config-shape.js';
import { errors } from './errors.js';
import type { NodesTable } from './nodes-migration.js';
import { choose, type NodeLoad, type PlacementRequest } from './scheduler.js';

export { nodesMigrations } from './nodes-migration.js';

export const NODE_STATES = ['active', 'cordoned', 'draining'] as const;
export type NodeState = (typeof NODE_STATES)[number];

export interface NodeView {
  id: string;
  address: string;
  state: NodeState;
  /** `up` while heartbeats arrive; `down` once none came for the configured time. */
  status: 'up' | 'down';
  cores: number;
  memoryBytes: number;
  sandboxes: number;
  databases: number;
  templates: string[];
  driver: string;
  version: string;
  startedAt: string;
  heartbeatAt: string;
}

/** What an area reports about this node at each heartbeat. */
export interface NodeHoldings {
  sandboxes?: number;
  databases?: number;
  templates?: string[];
}

/**
 * Thrown by an area's service when the work belongs on another node (a create placed there, or a
 * resource held there): the REST layer relays the request to that node over the internal channel.
 */
export class ElsewhereError extends Error {
  constructor(readonly nodeId: string) {
    super(`handled by node ${nodeId}`);
  }
}

/** Set while serving a request another replica relayed here: placement then keeps the work here. */
const pinned = new AsyncLocalStorage<true>();
export function runPinned<T>(fn: () => T): T {
  return pinned.run(true, fn);
}
/** True inside runPinned (a relayed request, a node-local job): new resources stay on this node. */
export function isPinned(): boolean {
  return pinned.getStore() === true;
}

export class NodeRegistry {
  readonly id: string;
  private address = '';
  private timer: NodeJS.Timeout | undefined;
  private readonly reporters: (() => Promise<NodeHoldings>)[] = [];
  private cache = new Map<string, NodeView>();
  private cachedAt = 0;
  /** Other nodes are known (any row but this one): until then, no request needs a lookup. */
  private others = false;
  /** Placements this replica made since the last read, so a burst between heartbeats spreads. */
  private readonly placed = new Map<string, { sandboxes: number; databases: number }>();
  private readonly startedAt = Date.now();
  /** When the last heartbeat that reached the store was taken (this node's clock); 0: none yet. */
  private lastBeat = 0;

  constructor(
    private readonly db: Kysely<Tables>,
    readonly config: NodesConfig,
    private readonly self: { driver: string; version: string },
    private readonly log: { warn(obj: unknown, msg: string): void },
  ) {
    this.id = config.id;
  }

  /** This process holds local state and takes placements. */
  get holdsState(): boolean {
    return this.config.role === 'worker';
  }

  /** True while this is the only node nube knows: forwarding has nothing to look up. */
  get solo(): boolean {
    return !this.others;
  }

  report(fn: () => Promise<NodeHoldings>): void {
    this.reporters.push(fn);
  }

  /** Registers (a worker) and starts heartbeats; `listenAddress` is used unless NUBE_NODE_ADDRESS is set. */
  async start(listenAddress: string): Promise<void> {
    this.address = this.config.address ?? listenAddress;
    if (this.holdsState) await this.heartbeat();
    await this.refresh();
    this.timer = setInterval(() => {
      const beat = this.holdsState ? this.heartbeat() : Promise.resolve();
      beat.then(() => this.refresh()).catch((err: unknown) => this.log.warn({ err }, 'node heartbeat failed'));
    }, this.config.heartbeatMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Writes this node's row (state is the operator's: an upsert never overwrites it). */
  async heartbeat(): Promise<void> {
    const held: Required<NodeHoldings> = { sandboxes: 0, databases: 0, templates: [] };
    for (const r of this.reporters) {
      const h = await r();
      if (h.sandboxes !== undefined) held.sandboxes += h.sandboxes;
      if (h.databases !== undefined) held.databases += h.databases;
      if (h.templates) held.templates.push(...h.templates);
    }
    const now = Date.now();
    const row: NodesTable = {
      id: this.id,
      address: this.address,
      state: 'active',
      cores: cpus().length,
      memory_bytes: totalmem(),
      sandboxes: held.sandboxes,
      databases: held.databases,
      templates: JSON.stringify([...new Set(held.templates)].sort()),
      driver: this.self.driver,
      version: this.self.version,
      started_at: this.startedAt,
      heartbeat_at: now,
    };
    const { state: _state, id: _id, ...update } = row;
    await this.db
      .insertInto('nodes')
      .values(row)
      .onConflict((oc) => oc.column('id').doUpdateSet(update))
      .execute();
    this.lastBeat = now;
  }

  /**
   * This worker's own heartbeats are recent enough that no other node can see it down yet. Once they are
   * not (stopped, or the store unreachable), other nodes may take its databases over: it must stop
   * serving its local copies. A heartbeat short of the down-after time keeps a margin for clock steps.
   */
  get selfUp(): boolean {
    if (!this.holdsState) return false;
    const margin = Math.min(this.config.heartbeatMs, this.config.downAfterMs / 4);
    return Date.now() - this.lastBeat < this.config.downAfterMs - margin;
  }

  /** Heartbeats of this node stopped (tests simulating a node's death, shutdown). */
  get beating(): boolean {
    return this.timer !== undefined;
  }

  /** Every node, with up/down from its last heartbeat. */
  async list(): Promise<NodeView[]> {
    const rows = await this.db.selectFrom('nodes').selectAll().orderBy('id').execute();
    const now = Date.now();
    return rows.map((r) => view(r, now, this.config.downAfterMs));
  }

  async refresh(): Promise<NodeView[]> {
    const nodes = await this.list();
    this.cache = new Map(nodes.map((n) => [n.id, n]));
    this.cachedAt = Date.now();
    this.placed.clear();
    this.others = nodes.some((n) => n.id !== this.id);
    return nodes;
  }

  /** A node by id, from a view at most a heartbeat old (read again on a miss). */
  async get(id: string): Promise<NodeView | undefined> {
    if (Date.now() - this.cachedAt > this.config.heartbeatMs || !this.cache.has(id)) await this.refresh();
    return this.cache.get(id);
  }

  async setState(id: string, state: NodeState): Promise<boolean> {
    const r = await this.db.updateTable('nodes').set({ state }).where('id', '=', id).executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  /** Removes a node's row (a node retired for good); it registers again if it ever heartbeats. */
  async forget(id: string): Promise<boolean> {
    const r = await this.db.deleteFrom('nodes').where('id', '=', id).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /**
   * The node a new resource goes to. A request relayed here by another replica was placed here
   * already. 503 when no node is up and active.
   */
  async place(req: PlacementRequest): Promise<string> {
    if (pinned.getStore() && this.holdsState) return this.id;
    // With other nodes, the table is read on every placement (one small SELECT): a create answered from
    // a warm pool takes milliseconds, so a view even 200 ms old misses other replicas' placements and a
    // round-robin burst piles onto one node. Alone, a view up to a second old still sees a cordon or a
    // node joining soon enough.
    const nodes = this.others ? await this.refresh() : await this.refreshIfStale();
    const loads: NodeLoad[] = nodes.map((n) => {
      const extra = this.placed.get(n.id);
      return {
        id: n.id,
        eligible: n.status === 'up' && n.state === 'active',
        cores: n.cores,
        memoryBytes: n.memoryBytes,
        sandboxes: n.sandboxes + (extra?.sandboxes ?? 0),
        databases: n.databases + (extra?.databases ?? 0),
        templates: n.templates,
      };
    });
    const chosen = choose(loads, req);
    if (!chosen) throw errors.unavailable(`no node can take a new ${req.kind}: every node is cordoned, draining or down`, 30);
    const extra = this.placed.get(chosen) ?? { sandboxes: 0, databases: 0 };
    if (req.kind === 'sandbox') extra.sandboxes++;
    else extra.databases++;
    this.placed.set(chosen, extra);
    // Other replicas see this placement at their next read of the table (at most a second when they
    // place), not only after the chosen node's next heartbeat: a burst spread over replicas spreads too.
    if (this.others) {
      const q = this.db.updateTable('nodes').where('id', '=', chosen);
      await (req.kind === 'sandbox'
        ? q.set((eb) => ({ sandboxes: eb('sandboxes', '+', 1) }))
        : q.set((eb) => ({ databases: eb('databases', '+', 1) }))
      ).execute();
    }
    return chosen;
  }

  /**
   * Where work on a resource held by `nodeId` runs: here (undefined) or the node to relay to. A row
   * without a node (made before nodes existed) is this node's. Throws 503 when its node is down.
   */
  async route(nodeId: string | null | undefined, what: string): Promise<string | undefined> {
    if (!nodeId || nodeId === this.id) return undefined;
    const node = await this.get(nodeId);
    if (!node || node.status === 'down') {
      throw errors.unavailable(`the node holding this ${what} (${nodeId}) is down; retry later`, 30);
    }
    return nodeId;
  }

  /** Why a resource held by `nodeId` is unreachable (its node down or gone), or null while it is up or here. */
  async lostReason(nodeId: string | null | undefined): Promise<string | null> {
    if (!nodeId || nodeId === this.id) return null;
    const node = await this.get(nodeId);
    if (!node) return `its node ${nodeId} is no longer registered`;
    return node.status === 'down' ? `its node ${nodeId} is down: no heartbeat since ${node.heartbeatAt}` : null;
  }

  /** Throws ElsewhereError (the REST layer relays) when `nodeId` is another node, 503 when it is down. */
  async assertHere(nodeId: string | null | undefined, what: string): Promise<void> {
    const other = await this.route(nodeId, what);
    if (other) throw new ElsewhereError(other);
  }

  /**
   * The job type of work that must run on one node (a sandbox's clocks, its provisioning): each node
   * leases only its own. A row without a node is this node's.
   */
  jobType(type: string, nodeId: string | null | undefined): string {
    return `${type}@${nodeId ?? this.id}`;
  }

  private async refreshIfStale(): Promise<NodeView[]> {
    if (Date.now() - this.cachedAt > Math.min(1000, this.config.heartbeatMs)) return this.refresh();
    return [...this.cache.values()];
  }
}

function view(r: NodesTable, now: number, downAfterMs: number): NodeView {
  const beat = Number(r.heartbeat_at);
  return {
    id: r.id,
    address: r.address,
    state: r.state as NodeState,
    status: now - beat > downAfterMs ? 'down' : 'up',
    cores: Number(r.cores),
    memoryBytes: Number(r.memory_bytes),
    sandboxes: Number(r.sandboxes),
    databases: Number(r.databases),
    templates: JSON.parse(r.templates) as string[],
    driver: r.driver,
    version: r.version,
    startedAt: new Date(Number(r.started_at)).toISOString(),
    heartbeatAt: new Date(beat).toISOString(),
  };
}
