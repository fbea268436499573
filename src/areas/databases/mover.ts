// Databases change nodes in two ways, both run by this loop on every worker node:
// - restore: a node is down (no heartbeat for NUBE_NODE_DOWN_AFTER_MS); one up node claims each of its
//   databases (a lease in the row, so two replicas never both restore one), the scheduler picks where it
//   goes, and that node installs the latest copy from the blob store and switches the row;
// - drain: this node is `draining`; it moves each database it holds: requests on it pause, the final
//   copy is taken, the chosen node installs it and switches the row, and the paused requests follow it.
// A node that finds a local file whose row names another node (it was taken for dead and came back)
// archives the file: it never serves it again.
import { createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import type { Kysely } from 'kysely';
import type { BlobStore } from '../../blob/index.js';
import type { NodeForwarder } from '../../platform/node-forward.js';
import type { NodeRegistry } from '../../platform/nodes.js';
import type { Tables } from '../../store/schema.js';
import type { DatabaseCopies } from './copies.js';
import type { DatabaseEngine } from './engine/index.js';
import { extend, type Materialized, materialize } from './history/materialize.js';

/** What the mover needs of the databases service (an interface here, so the two files import no circle). */
export interface DatabaseGate {
  /** Holds new requests on a database and resolves once running ones finished; release(to) ends it. */
  pause(id: string): Promise<{ release(to?: string): void }>;
  /** The database left this node: forget what was cached about it. */
  forgetLocal(id: string): void;
  readonly placement: { moved(id: string, nodeId: string): void };
}

/** A claim to restore or move a database holds this long; a claimer that dies lets another retry. */
const CLAIM_MS = 60_000;
/** A failed restore (copy unreadable, target unreachable) is tried again after this long. */
const RETRY_MS = 5000;
/** Databases of down nodes one pass claims at most (the rest on the next passes). */
const RESTORE_BATCH = 16;

/** Internal route another node calls to hand a database over (node credential only). */
export const ADOPT_PATH = '/internal/databases/:id/adopt';

export interface AdoptRequest {
  /** The node the row names now: the switch happens only if it still does. */
  from: string;
  /** Blob key of the copy to install; null: the database was never copied (restored empty). */
  key: string | null;
  /** When that copy's snapshot began. */
  at: number | null;
  /**
   * Build the database up to `key` and keep it, without switching (a drain, before its pause): the
   * adopt that follows applies only the segments after it.
   */
  prepare?: boolean;
}

/** A prepared build is dropped when its adopt does not come within this long. */
const PREPARED_MS = 5 * 60_000;

export interface MoveStats {
  restored: number;
  moved: number;
  archived: number;
  /** Adoptions that only applied the tail to a build prepared before the pause. */
  extended: number;
  /** Write pause of each drain move (ms), last 1,000. */
  pauses: number[];
  /**
   * Each move's pause in parts: waiting for the requests running when it began, the final copy
   * (snapshot + PUT), the target's download, install and row switch.
   */
  phases: { runningMs: number; copyMs: number; adoptMs: number }[];
}

export class DatabaseMover {
  private timer: NodeJS.Timeout | undefined;
  private busy: Promise<void> | undefined;
  /** Databases being installed here: their row still names the old node, so reconcile leaves them. */
  private readonly adopting = new Set<string>();
  /** Databases built ahead of a drain's pause (prepare), per id. */
  private readonly prepared = new Map<string, { path: string; built: Materialized; until: number }>();
  readonly stats: MoveStats = { restored: 0, moved: 0, archived: 0, extended: 0, pauses: [], phases: [] };

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly engine: DatabaseEngine,
    private readonly store: () => BlobStore,
    private readonly nodes: NodeRegistry,
    private readonly forwarder: NodeForwarder,
    private readonly copies: DatabaseCopies,
    private readonly service: DatabaseGate,
    private readonly log: { warn(obj: unknown, msg: string): void; info(obj: unknown, msg: string): void },
  ) {}

  start(everyMs: number): void {
    this.timer = setInterval(() => void this.tick(), everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.busy?.catch(() => {});
  }

  /** One pass (tests call it to skip the wait); passes never overlap. */
  tick(): Promise<void> {
    if (this.busy) return this.busy;
    this.busy = this.pass()
      .catch((err: unknown) => this.log.warn({ err }, 'database mover pass failed'))
      .finally(() => {
        this.busy = undefined;
      });
    return this.busy;
  }

  private async pass(): Promise<void> {
    // Without recent heartbeats of its own a node may itself be taken for dead: it claims nothing.
    if (!this.nodes.holdsState || this.nodes.solo || !this.nodes.selfUp) return;
    await this.reconcile();
    const nodes = await this.nodes.list();
    const self = nodes.find((n) => n.id === this.nodes.id);
    if (self?.state === 'draining') await this.drain();
    const down = nodes.filter((n) => n.status === 'down').map((n) => n.id);
    if (down.length) await this.restoreFrom(down);
  }

  /**
   * Local files of databases whose row names another node are archived, never served. At start (before
   * anything is served, so no delete is halfway), a database this node holds whose file is missing (a
   * lost or replaced disk) is restored from its latest copy.
   */
  async reconcile(atStart = false): Promise<void> {
    const local = new Set(await this.engine.localIds());
    const mine = await this.db.selectFrom('databases').select(['id', 'copy_key', 'copy_at']).where('node_id', '=', this.nodes.id).execute();
    if (atStart) {
      for (const r of mine) {
        if (local.has(r.id) || !r.copy_key) continue;
        const req = { from: this.nodes.id, key: r.copy_key, at: Number(r.copy_at) };
        await this.adopt(r.id, req).then(
          () => this.log.warn({ db: r.id, copyAt: req.at }, 'restored a database whose file was missing from its latest copy'),
          (err: unknown) => this.log.warn({ err, db: r.id }, 'a database file is missing and its copy could not be restored'),
        );
      }
    }
    if (local.size === 0) return;
    for (const r of mine) local.delete(r.id);
    for (const id of this.adopting) local.delete(id);
    if (local.size === 0) return;
    const rows = await this.db
      .selectFrom('databases')
      .select(['id', 'node_id'])
      .where('id', 'in', [...local])
      .execute();
    for (const r of rows) {
      // Rows without a node are this node's (claimUnplaced); a file without a row may be a create in flight.
      if (!r.node_id || r.node_id === this.nodes.id || this.adopting.has(r.id)) continue;
      this.service.forgetLocal(r.id);
      await this.copies.forget(r.id);
      await this.engine.archive(r.id);
      this.stats.archived++;
      this.log.warn({ db: r.id, node: r.node_id }, 'archived a local database file: the database lives on another node now');
    }
  }

  /** Claims the databases of down nodes (a lease in the row) and has each restored where the scheduler says. */
  private async restoreFrom(down: string[]): Promise<void> {
    const now = Date.now();
    const rows = await this.db
      .selectFrom('databases')
      .select(['id', 'node_id', 'copy_key', 'copy_at'])
      .where('node_id', 'in', down)
      .where((eb) => eb.or([eb('claim_until', 'is', null), eb('claim_until', '<', now)]))
      .limit(RESTORE_BATCH)
      .execute();
    for (const r of rows) {
      const claimed = await this.db
        .updateTable('databases')
        .set({ claim_node: this.nodes.id, claim_until: Date.now() + CLAIM_MS })
        .where('id', '=', r.id)
        .where('node_id', '=', r.node_id)
        .where((eb) => eb.or([eb('claim_until', 'is', null), eb('claim_until', '<', Date.now())]))
        .executeTakeFirst();
      if (Number(claimed.numUpdatedRows) === 0) continue;
      const req: AdoptRequest = { from: r.node_id as string, key: r.copy_key, at: r.copy_at === null ? null : Number(r.copy_at) };
      try {
        const to = await this.nodes.place({ kind: 'database' });
        const ok = to === this.nodes.id ? await this.adopt(r.id, req) : await this.askToAdopt(to, r.id, req);
        if (ok) {
          this.stats.restored++;
          this.log.info({ db: r.id, from: req.from, to, copyAt: req.at }, 'restored a database of a down node');
        }
      } catch (err) {
        this.log.warn({ err, db: r.id }, 'restoring a database of a down node failed; retried in a few seconds');
        await this.release(r.id, RETRY_MS);
      }
    }
  }

  /** Moves every database this draining node holds, one at a time. */
  private async drain(): Promise<void> {
    const rows = await this.db.selectFrom('databases').select('id').where('node_id', '=', this.nodes.id).execute();
    for (const r of rows) {
      const still = (await this.nodes.list()).find((n) => n.id === this.nodes.id);
      if (still?.state !== 'draining') return;
      await this.move(r.id).catch((err: unknown) => this.log.warn({ err, db: r.id }, 'moving a database off a draining node failed; the next pass retries'));
    }
  }

  /**
   * Moves one database held here to the node the scheduler picks: requests on it pause, the final copy
   * (everything acknowledged) goes to the blob store, the target installs it and switches the row, and
   * the paused requests are relayed there. Returns the pause in ms.
   */
  async move(id: string): Promise<number> {
    const to = await this.nodes.place({ kind: 'database' });
    if (to === this.nodes.id) throw new Error('the scheduler chose the draining node itself');
    // Shipped before the pause, and built on the target from snapshot and segments meanwhile: the pause
    // then covers only the tail (the last segments), not the database's size.
    const pre = await this.copies.shipNow(id);
    if (pre.key) {
      await this.askToAdopt(to, id, { from: this.nodes.id, key: pre.key, at: pre.at, prepare: true }).catch((err: unknown) =>
        this.log.warn({ err, db: id }, 'building a database ahead of its move failed; the move builds it during the pause'),
      );
    }
    const started = performance.now();
    const gate = await this.service.pause(id);
    const drained = performance.now();
    let copied = drained;
    let moved = false;
    try {
      const final = await this.copies.shipNow(id);
      copied = performance.now();
      moved = await this.askToAdopt(to, id, { from: this.nodes.id, key: final.key, at: final.at });
    } finally {
      gate.release(moved ? to : undefined);
    }
    const pause = performance.now() - started;
    this.stats.phases.push({ runningMs: drained - started, copyMs: copied - drained, adoptMs: performance.now() - copied });
    if (this.stats.phases.length > 1000) this.stats.phases.shift();
    if (moved) {
      await this.copies.forget(id);
      await this.engine.delete(id);
      this.stats.moved++;
      this.stats.pauses.push(pause);
      if (this.stats.pauses.length > 1000) this.stats.pauses.shift();
    }
    return pause;
  }

  private async askToAdopt(to: string, id: string, req: AdoptRequest): Promise<boolean> {
    const r = await this.forwarder.call(to, 'POST', ADOPT_PATH.replace(':id', id), req);
    if (r.status === 200) return true;
    if (r.status === 409) return false;
    throw new Error(`node ${to} could not take database ${id} over: ${r.status} ${JSON.stringify(r.body)}`);
  }

  /**
   * Installs the copy `req.key` as database `id` here and switches its row to this node, if the row
   * still names `req.from`. False (and nothing kept) when another node got there first.
   */
  async adopt(id: string, req: AdoptRequest): Promise<boolean> {
    await this.dropPrepared();
    if (req.prepare) {
      if (!req.key || req.key.startsWith('database-copies/')) return true;
      const path = await this.engine.stagingPath(id);
      const built = await materialize(this.store(), this.copies.history, id, { key: req.key }, path);
      const old = this.prepared.get(id);
      this.prepared.set(id, { path, built, until: Date.now() + PREPARED_MS });
      if (old) await rm(old.path, { force: true });
      return true;
    }
    this.adopting.add(id);
    try {
      let from: Materialized | undefined;
      if (req.key) {
        const staging = await this.engine.stagingPath(id);
        const ready = this.prepared.get(id);
        this.prepared.delete(id);
        try {
          // A build prepared before the pause: only the tail to apply (else, or if that fails, from scratch).
          if (ready) from = (await extend(this.store(), this.copies.history, ready.path, ready.built, req.key).catch(() => null)) ?? undefined;
          if (from && ready) {
            await rename(ready.path, staging);
            this.stats.extended++;
          } else if (req.key.startsWith('database-copies/')) {
            // A whole copy shipped before WAL shipping.
            const got = await this.store().get(req.key);
            await pipeline(got.stream, createWriteStream(staging));
          } else {
            // The latest snapshot and every segment after it, up to the one the row names.
            from = await materialize(this.store(), this.copies.history, id, { key: req.key }, staging);
          }
          await this.copies.forget(id);
          await this.engine.install(id, staging);
          await this.copies.hold(id);
        } finally {
          await rm(staging, { force: true });
          if (ready) await rm(ready.path, { force: true });
        }
      } else {
        // Never copied: its node died within the first copy interval after the create.
        await this.engine.delete(id);
        await this.engine.create(id);
      }
      // Only over the copy installed: a newer copy named meanwhile (its old node was slow, not dead) is
      // restored by the next pass instead.
      let q = this.db
        .updateTable('databases')
        .set({ node_id: this.nodes.id, claim_node: null, claim_until: null })
        .where('id', '=', id)
        .where('node_id', '=', req.from);
      q = req.key === null ? q.where('copy_key', 'is', null) : q.where('copy_key', '=', req.key);
      const r = await q.executeTakeFirst();
      if (Number(r.numUpdatedRows) === 0) {
        await this.copies.forget(id);
        await this.engine.delete(id);
        return false;
      }
      // Shipping goes on in the same generation: the installed file is the history's state at its head.
      await this.copies.adopted(id, from);
      this.service.forgetLocal(id);
      this.service.placement.moved(id, this.nodes.id);
      return true;
    } finally {
      this.adopting.delete(id);
    }
  }

  /** Removes builds whose adopt never came. */
  private async dropPrepared(): Promise<void> {
    const now = Date.now();
    for (const [id, p] of this.prepared) {
      if (p.until > now) continue;
      this.prepared.delete(id);
      await rm(p.path, { force: true });
    }
  }

  /** Gives a claim up, so that another pass (of any node) retries after `afterMs`. */
  private async release(id: string, afterMs: number): Promise<void> {
    await this.db
      .updateTable('databases')
      .set({ claim_node: null, claim_until: Date.now() + afterMs })
      .where('id', '=', id)
      .where('claim_node', '=', this.nodes.id)
      .execute()
      .catch(() => {});
  }
}
