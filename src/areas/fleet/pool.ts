// The elastic pool: each fleet agent's boxes (agents of the owner), up to the fleet agent's capacity and
// the host's NUBE_FLEET_MAX_BOXES, shrunk when idle. A box serves ONE conversation for its whole life:
// the end users of a fleet agent are strangers, and whatever a conversation leaves in its box (files,
// the agent's session history, processes, what its MCP connectors were given) must never be seen by
// another. So a conversation keeps its box while it has one (its model memory is a session there);
// without one it takes a spare (a box built ahead, handed to one conversation and never to a second),
// else a new box, else, at capacity, the box of the conversation idle the longest is destroyed and a
// new one built (that conversation moves to a fresh box with its transcript on its next turn). When no
// box can be had a turn waits in a FIFO bounded per fleet agent; past that bound the answer is 503
// FleetFull with a `retryAfter` computed from the measured turn and build times and the work ahead,
// including earlier 503s told to come back (so the clients told to retry at once are not all told the
// same instant).
import type { FleetConfig } from '../../platform/config-shape.js';

export interface Box {
  id: string;
  agentId: string;
  ownerId: string;
  fleetAgentId: string;
  /** The one conversation it serves; null: a spare, given to the next conversation that needs a box. */
  groupId: string | null;
  /** 1 while a turn holds it (a conversation runs one turn at a time). */
  active: number;
  lastUsed: number;
  /** Resolves once the box is built and bound to its conversation (rejects when that failed). */
  ready: Promise<void>;
  /** When the current turn got its slot: a turn's occupancy (building the box included) is what frees places. */
  granted?: number[];
  /** When building started, and when it ended (unset while building). */
  buildStarted?: number;
  builtAt?: number;
}

interface Waiter {
  groupId: string;
  grant: (box: Box | PromiseLike<Box>) => void;
}

export interface Admission {
  /** Seconds the client would wait in the queue (0: runs now). */
  eta: number;
  slot: Promise<Box>;
}

export interface BoxFactory {
  /** Builds a box for the fleet agent, bound to `groupId` (null: a spare). */
  create(fleetAgentId: string, groupId: string | null): Promise<{ id: string; agentId: string; ownerId: string }>;
  /** Records that the spare `boxId` now serves `groupId` (before any turn of it runs there). */
  bind(boxId: string, groupId: string): Promise<void>;
  /** Destroys a box that left the pool (idle, evicted): its agent and sandbox go. */
  destroy(box: Box): Promise<void>;
}

class FleetPool {
  boxes: Box[] = [];
  waiters: Waiter[] = [];
  /**
   * groupId -> when a 503'd client was told to come back, and until when that holds. A client coming
   * back then takes a place in the queue even past its bound: the retryAfter it was given is honoured.
   */
  promised = new Map<string, { at: number; until: number }>();
  avgTurnMs = 5_000;
  measured = false;
  /** Measured box build time (a box being built delays its first turn by what remains of it). */
  avgBuildMs = 10_000;
  buildMeasured = false;
  /** The fleet agent's capacity as last seen (spares are refilled within it). */
  capacity = 1;
}

export class Pools {
  private readonly pools = new Map<string, FleetPool>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly cfg: FleetConfig,
    private readonly factory: BoxFactory,
    private readonly onError: (e: unknown) => void,
  ) {}

  private pool(fleetAgentId: string): FleetPool {
    let p = this.pools.get(fleetAgentId);
    if (!p) {
      p = new FleetPool();
      this.pools.set(fleetAgentId, p);
    }
    return p;
  }

  private total(): number {
    let n = 0;
    for (const p of this.pools.values()) n += p.boxes.length;
    return n;
  }

  /** Boxes restored after a restart of nube. */
  restore(box: Omit<Box, 'active' | 'ready' | 'builtAt'>): void {
    this.pool(box.fleetAgentId).boxes.push({ ...box, active: 0, ready: Promise.resolve(), builtAt: box.lastUsed });
  }

  stats(fleetAgentId: string) {
    const p = this.pool(fleetAgentId);
    return {
      boxes: p.boxes.length,
      spares: p.boxes.filter((b) => b.groupId === null).length,
      active: p.boxes.reduce((n, b) => n + b.active, 0),
      queued: p.waiters.length,
      avgTurnMs: Math.round(p.avgTurnMs),
    };
  }

  private take(box: Box): Promise<Box> {
    box.active++;
    box.granted = [...(box.granted ?? []), Date.now()];
    return box.ready.then(() => box);
  }

  /** A box for a turn of `groupId` now, or null (then it waits). Binds a spare, grows or evicts when it may. */
  private pick(p: FleetPool, fleetAgentId: string, capacity: number, groupId: string): Box | null {
    const own = p.boxes.find((b) => b.groupId === groupId);
    if (own) return own.active === 0 ? own : null;
    const spare = p.boxes.find((b) => b.groupId === null);
    if (spare) return this.bind(spare, groupId);
    if (p.boxes.length < capacity && this.total() < this.cfg.maxBoxes) return this.grow(p, fleetAgentId, groupId);
    // At capacity: the conversation idle the longest gives up its box (destroyed, never handed over).
    let victim: Box | null = null;
    for (const b of p.boxes) if (b.active === 0 && b.builtAt !== undefined && (!victim || b.lastUsed < victim.lastUsed)) victim = b;
    if (!victim) return null;
    this.evict(p, victim);
    return this.grow(p, fleetAgentId, groupId);
  }

  private bind(box: Box, groupId: string): Box {
    box.groupId = groupId;
    box.ready = box.ready.then(() => this.factory.bind(box.id, groupId));
    box.ready.catch(() => {});
    return box;
  }

  private evict(p: FleetPool, box: Box): void {
    p.boxes = p.boxes.filter((b) => b !== box);
    this.factory.destroy(box).catch(this.onError);
  }

  private grow(p: FleetPool, fleetAgentId: string, groupId: string | null): Box {
    const box: Box = {
      id: '',
      agentId: '',
      ownerId: '',
      fleetAgentId,
      groupId,
      active: 0,
      lastUsed: Date.now(),
      ready: Promise.resolve(),
      buildStarted: Date.now(),
    };
    box.ready = this.factory.create(fleetAgentId, groupId).then(
      (made) => {
        box.builtAt = Date.now();
        const ms = box.builtAt - (box.buildStarted ?? box.builtAt);
        p.avgBuildMs = p.buildMeasured ? p.avgBuildMs * 0.7 + ms * 0.3 : ms;
        p.buildMeasured = true;
        box.id = made.id;
        box.agentId = made.agentId;
        box.ownerId = made.ownerId;
        box.lastUsed = box.builtAt;
      },
      (e: unknown) => {
        p.boxes = p.boxes.filter((b) => b !== box);
        this.wake(fleetAgentId, Number.POSITIVE_INFINITY);
        throw e;
      },
    );
    box.ready.catch(() => {});
    p.boxes.push(box);
    return box;
  }

  /**
   * Builds spares up to NUBE_FLEET_SPARE_BOXES within the capacity, so a new conversation finds a box
   * built. Called when a turn ends, not when one starts: a build beside a starting turn slows it (two
   * cores here).
   */
  private refill(p: FleetPool, fleetAgentId: string): void {
    let spares = p.boxes.filter((b) => b.groupId === null).length;
    while (spares < this.cfg.spareBoxes && p.waiters.length === 0 && p.boxes.length < p.capacity && this.total() < this.cfg.maxBoxes) {
      this.grow(p, fleetAgentId, null).ready.catch(this.onError);
      spares++;
    }
  }

  /**
   * Admits a turn of conversation `groupId`: a slot now, a place in the queue (`eta` > 0), or throws
   * `full(retryAfter)`.
   */
  admit(fleetAgentId: string, capacity: number, groupId: string, full: (retryAfter: number) => Error): Admission {
    const p = this.pool(fleetAgentId);
    p.capacity = capacity;
    const now = Date.now();
    const promise = p.promised.get(groupId);
    p.promised.delete(groupId);
    const honoured = promise !== undefined && now >= promise.at - 500 && now <= promise.until;
    for (const [g, pr] of p.promised) if (pr.until < now) p.promised.delete(g);
    const slots = Math.max(1, capacity);
    if (p.waiters.length === 0) {
      const box = this.pick(p, fleetAgentId, capacity, groupId);
      if (box) return { eta: 0, slot: this.take(box) };
    }
    const maxQueue = Math.max(1, Math.ceil(capacity * this.cfg.queueFactor));
    if (p.waiters.length >= maxQueue && !honoured) {
      // Turns to finish before this client finds a free place in the queue, at `slots` turns at a time.
      const running = p.boxes.reduce((n, b) => n + b.active, 0);
      const ahead = running + p.waiters.length + p.promised.size;
      const need = Math.max(1, ahead - (slots + maxQueue) + 1);
      // A waiting conversation gets a freed place only by a new box built there: a build counts per turn.
      const retryAfter = Math.max(1, Math.ceil((this.buildWait(p, now) + Math.ceil(need / slots) * (p.avgTurnMs + p.avgBuildMs)) / 1000));
      p.promised.set(groupId, { at: now + retryAfter * 1000, until: now + retryAfter * 1000 + Math.max(60_000, p.avgTurnMs) });
      throw full(retryAfter);
    }
    const position = p.waiters.length + 1;
    const eta = Math.max(1, Math.ceil((this.buildWait(p, now) + Math.ceil(position / slots) * (p.avgTurnMs + p.avgBuildMs)) / 1000));
    const slot = new Promise<Box>((grant) => p.waiters.push({ groupId, grant }));
    return { eta, slot };
  }

  /** What remains of the builds in progress (the longest): no slot of theirs frees before it. */
  private buildWait(p: FleetPool, now: number): number {
    let ms = 0;
    for (const b of p.boxes) if (b.builtAt === undefined && b.buildStarted !== undefined) ms = Math.max(ms, b.buildStarted + p.avgBuildMs - now);
    return Math.max(0, ms);
  }

  /** A turn accepted before a restart: it waits for a slot whatever the queue's bound. */
  queue(fleetAgentId: string, capacity: number, groupId: string): Promise<Box> {
    const p = this.pool(fleetAgentId);
    p.capacity = capacity;
    const box = p.waiters.length === 0 ? this.pick(p, fleetAgentId, capacity, groupId) : null;
    if (box) return this.take(box);
    return new Promise<Box>((grant) => p.waiters.push({ groupId, grant }));
  }

  /** A turn ended on `box` (`ran`: it ran, so its time counts): the slot goes to the first waiter that can use it. */
  release(box: Box, ran: boolean, capacity: number): void {
    const p = this.pool(box.fleetAgentId);
    box.active = Math.max(0, box.active - 1);
    box.lastUsed = Date.now();
    const since = box.granted?.shift();
    if (ran && since !== undefined) {
      // From the grant, or from the end of the build for a turn that waited for its box to be built.
      const ms = box.lastUsed - Math.max(since, box.builtAt ?? 0);
      p.avgTurnMs = p.measured ? p.avgTurnMs * 0.8 + ms * 0.2 : ms;
      p.measured = true;
    }
    this.wake(box.fleetAgentId, capacity);
    this.refill(p, box.fleetAgentId);
  }

  /** The box is gone (its agent lost or deleted): it leaves the pool; waiting turns are placed again. */
  drop(box: Box, capacity: number): void {
    const p = this.pool(box.fleetAgentId);
    p.boxes = p.boxes.filter((b) => b !== box);
    this.wake(box.fleetAgentId, capacity);
  }

  private wake(fleetAgentId: string, capacity: number): void {
    const p = this.pool(fleetAgentId);
    const cap = Number.isFinite(capacity) ? capacity : p.capacity;
    for (let i = 0; i < p.waiters.length; ) {
      const w = p.waiters[i]!;
      const box = this.pick(p, fleetAgentId, cap, w.groupId);
      if (!box) {
        i++;
        continue;
      }
      p.waiters.splice(i, 1);
      w.grant(this.take(box));
    }
  }

  /** Removes boxes idle longer than NUBE_FLEET_IDLE_SECONDS (checked every few seconds), spares included. */
  startShrinking(): void {
    const every = Math.max(1_000, Math.min(30_000, this.cfg.idleMs / 4));
    this.timer = setInterval(() => {
      const now = Date.now();
      for (const p of this.pools.values()) {
        for (const b of [...p.boxes]) {
          if (b.active > 0 || !b.id || now - b.lastUsed < this.cfg.idleMs) continue;
          this.evict(p, b);
        }
      }
    }, every);
    this.timer.unref();
  }

  /** Every box of a fleet agent (deleted): they leave the pool. */
  remove(fleetAgentId: string): Box[] {
    const p = this.pools.get(fleetAgentId);
    this.pools.delete(fleetAgentId);
    return p?.boxes ?? [];
  }

  close(): void {
    clearInterval(this.timer);
  }
}
