// Copies of each user database in the blob store (S3 when configured, the local blob directory
// otherwise), so a database survives the death of the node holding its file: another node restores the
// latest copy (mover.ts). A database is copied whole (the engine's VACUUM INTO snapshot, consistent while
// writes go on) soon after it changes, at most once per `shipMs`; its row names the latest copy, when
// that copy's snapshot began and the database's size (read by list and the storage quota on any node).
import { createReadStream } from 'node:fs';
import type { Kysely, Migration } from 'kysely';
import type { BlobStore } from '../../blob/index.js';
import { newId } from '../../platform/ids.js';
import type { Tables } from '../../store/schema.js';
import type { DatabaseEngine } from './engine/index.js';

export const databaseCopiesMigrations: Record<string, Migration> = {
  '0161-databases-copies': {
    async up(db: Kysely<unknown>) {
      // Size as the holder last reported it: a list on another node reads it instead of a local file.
      await db.schema.alterTable('databases').addColumn('size_bytes', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable('databases').addColumn('copy_key', 'text').execute();
      await db.schema.alterTable('databases').addColumn('copy_at', 'bigint').execute();
      // A lease: the one node restoring or moving the database (mover.ts), until claim_until.
      await db.schema.alterTable('databases').addColumn('claim_node', 'text').execute();
      await db.schema.alterTable('databases').addColumn('claim_until', 'bigint').execute();
    },
  },
};

/** Blob key of one copy; a new key per copy, so a restore never reads a half-written object. */
function copyKey(id: string): string {
  return `database-copies/${id}/${newId('copy')}.sqlite`;
}

export interface ShipResult {
  /** The latest copy's key (null: no file here; or, when not forced, unchanged and not looked up). */
  key: string | null;
  /** When that copy's snapshot began: every write acknowledged before it is in the copy. */
  at: number;
}

export interface CopyStats {
  shipped: number;
  failed: number;
  lastError?: string;
  /** ms from a database's last change to its copy being named by the row, per ship (last 1,000). */
  lags: number[];
}

export class DatabaseCopies {
  /** Per database: when the snapshot of its latest copy began (writes before it are in the copy). */
  private readonly shippedFrom = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** A ship running per database; a second one waits for it. */
  private readonly running = new Map<string, Promise<ShipResult>>();
  private readonly again = new Set<string>();
  private stopped = false;
  readonly stats: CopyStats = { shipped: 0, failed: 0, lags: [] };

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly engine: DatabaseEngine,
    private readonly store: () => BlobStore,
    private readonly nodeId: string,
    readonly shipMs: number,
    private readonly log: { warn(obj: unknown, msg: string): void },
  ) {}

  /** At start: every database this node holds is copied if it changed since its row's copy. */
  async resume(): Promise<void> {
    const rows = await this.db.selectFrom('databases').select(['id', 'copy_at']).where('node_id', '=', this.nodeId).execute();
    for (const r of rows) {
      if (r.copy_at !== null) this.shippedFrom.set(r.id, Number(r.copy_at));
      this.touch(r.id);
    }
  }

  /** The database may have changed: copy it within `shipMs` of its last copy. */
  touch(id: string): void {
    if (this.stopped || this.timers.has(id)) return;
    if (this.running.has(id)) {
      this.again.add(id);
      return;
    }
    const last = this.shippedFrom.get(id) ?? 0;
    const wait = Math.max(0, last + this.shipMs - Date.now());
    const t = setTimeout(() => {
      this.timers.delete(id);
      this.ship(id).catch(() => {});
    }, wait);
    t.unref();
    this.timers.set(id, t);
  }

  /** A copy as of now (the drain's final catch-up): waits for a running one, then copies if changed. */
  async shipNow(id: string): Promise<ShipResult> {
    const t = this.timers.get(id);
    if (t) clearTimeout(t);
    this.timers.delete(id);
    await this.running.get(id)?.catch(() => {});
    return this.ship(id, true);
  }

  /** A copy of the database is due or being taken (false: the latest copy holds every change seen). */
  pending(id: string): boolean {
    return this.timers.has(id) || this.running.has(id) || this.again.has(id);
  }

  /** This node took the database over from `at`'s copy: nothing to ship until it changes. */
  adopted(id: string, at: number): void {
    this.shippedFrom.set(id, at);
  }

  /** The database left this node (deleted or moved): no more copies from here. */
  forget(id: string): void {
    const t = this.timers.get(id);
    if (t) clearTimeout(t);
    this.timers.delete(id);
    this.again.delete(id);
    this.shippedFrom.delete(id);
  }

  /** Removes a deleted database's latest copy. */
  async removeCopy(key: string | null): Promise<void> {
    if (key) await this.store().delete(key).catch((err: unknown) => this.log.warn({ err, key }, 'removing a database copy failed'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.running.values()]);
  }

  private ship(id: string, force = false): Promise<ShipResult> {
    const run = this.shipOnce(id, force).finally(() => {
      this.running.delete(id);
      if (this.again.delete(id)) this.touch(id);
    });
    this.running.set(id, run);
    run.catch((err: unknown) => {
      this.stats.failed++;
      this.stats.lastError = String(err);
      this.log.warn({ err, db: id }, 'copying a database to the blob store failed');
      // Tried again after the usual interval (running was cleared by then).
      this.touch(id);
    });
    return run;
  }

  private async shipOnce(id: string, force: boolean): Promise<ShipResult> {
    const from = Date.now();
    const changed = await this.engine.changedAt(id);
    const last = this.shippedFrom.get(id);
    // Unchanged since the last copy's snapshot began (a read-only spell): no store round trip at all.
    if (!force && changed > 0 && last !== undefined && changed < last) return { key: null, at: last };
    const row = await this.db.selectFrom('databases').select(['copy_key', 'copy_at', 'node_id']).where('id', '=', id).executeTakeFirst();
    if (!row || row.node_id !== this.nodeId || changed === 0) {
      this.forget(id);
      return { key: null, at: from };
    }
    // Unchanged since the last copy's snapshot began (mtime before it): that copy holds everything.
    if (row.copy_key && last !== undefined && changed < last) return { key: row.copy_key, at: Number(row.copy_at) };
    if (this.stopped && !force) return { key: row.copy_key, at: Number(row.copy_at ?? 0) };
    const snap = await this.engine.export(id);
    const key = copyKey(id);
    try {
      await this.store().put(key, createReadStream(snap.path), { contentType: 'application/vnd.sqlite3', expectedSize: snap.sizeBytes });
    } finally {
      await snap.dispose();
    }
    const size = await this.engine.sizeBytes(id).catch(() => snap.sizeBytes);
    // Only while this node holds it, and only over the copy it read: a move or restore wins.
    let q = this.db.updateTable('databases').set({ copy_key: key, copy_at: from, size_bytes: size }).where('id', '=', id).where('node_id', '=', this.nodeId);
    q = row.copy_key === null ? q.where('copy_key', 'is', null) : q.where('copy_key', '=', row.copy_key);
    const r = await q.executeTakeFirst();
    if (Number(r.numUpdatedRows) === 0) {
      await this.removeCopy(key);
      return this.shipOnce(id, force);
    }
    this.shippedFrom.set(id, from);
    await this.removeCopy(row.copy_key);
    this.stats.shipped++;
    this.stats.lags.push(Date.now() - changed);
    if (this.stats.lags.length > 1000) this.stats.lags.shift();
    return { key, at: from };
  }
}
