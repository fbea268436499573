// Each user database's history in the blob store (S3 when configured, the local blob directory
// otherwise): a snapshot now and then (a generation), and after it the WAL frames SQLite writes,
// shipped in gzip segments at most `shipMs` apart. Bytes shipped follow the pages changed, not the
// database's size. The databases row names the latest object shipped (copy_key, compared on each
// switch, so a node that lost the database cannot ship over its new holder), when it was read
// (copy_at) and the size. Another node restores the latest snapshot plus its segments (mover.ts); a
// caller restores any point of the plan's window (service.ts). Design: docs/decisions.md,
// "Databases: history".
//
// Checkpoints. Executors never checkpoint (wal_autocheckpoint=0, connection.ts); this node holds a
// connection to each database it ships (so no executor's close is the last one, which would
// checkpoint and delete the WAL), and checkpoints itself once the WAL is long: under the database's
// write lock it reads the tail, checkpoints, and lets go. SQLite restarts a WAL only after a checkpoint
// copied all of it, so no frame is overwritten before it was read.
import { spawn } from 'node:child_process';
import { createReadStream, existsSync } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { gzip as gzipCb, createGzip } from 'node:zlib';
import Database from 'better-sqlite3';
import type { Kysely, Migration } from 'kysely';
import type { BlobStore } from '../../blob/index.js';
import { newId } from '../../platform/ids.js';
import type { Tables } from '../../store/schema.js';
import type { DatabaseEngine } from './engine/index.js';
import { HistoryRepo } from './history/history-repo.js';
import type { Materialized } from './history/materialize.js';
import { readWalTail, WAL_HEADER_BYTES, type WalTail } from './history/wal-file.js';

const gzip = promisify(gzipCb);

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

/** A WAL longer than this is checkpointed once shipped (SQLite's own default is about 4 MB too). */
const CHECKPOINT_BYTES = 4 * 1024 * 1024;
/** A new generation once the segments of the current one weigh this many times its snapshot (and 64 MB). */
const SNAPSHOT_EVERY_FACTOR = 1;
const SNAPSHOT_MIN_WAL_BYTES = 64 * 1024 * 1024;
/** And at least this often, so a restore replays at most a day of segments. */
const SNAPSHOT_EVERY_MS = 24 * 3600_000;

export const HISTORY_PREFIX = 'database-history';

export interface ShipResult {
  /** The latest object's key (null: no file here). */
  key: string | null;
  /** When the WAL was last read: every write acknowledged before it is in the history. */
  at: number;
}

export interface CopyStats {
  shipped: number;
  failed: number;
  generations: number;
  checkpoints: number;
  /** Compressed bytes put in the blob store (segments and snapshots). */
  bytesShipped: number;
  lastError?: string;
  /** ms from a database's last change to its segment being named by the row, per ship (last 1,000). */
  lags: number[];
}

/** Where shipping stands in one database's WAL. */
interface Position {
  generation: string;
  startedAt: number;
  snapshotBytes: number;
  walBytes: number;
  seq: number;
  walIndex: number;
  /** The WAL's salts (null: there was no WAL when the generation began; the first one is index 0). */
  salt: [number, number] | null;
  offset: number;
  cksum: [number, number] | null;
  /** Our last checkpoint copied the whole WAL up to `offset`: a restarted WAL continues this generation. */
  restartable: boolean;
  head: string;
  at: number;
}

/** A test may stop the process at a step of shipping (crash-safety test); never set in production. */
export type ShipFault = 'after-segment-upload' | 'after-snapshot-upload';

export class DatabaseCopies {
  readonly history: HistoryRepo;
  private readonly positions = new Map<string, Position>();
  /** Per database: this process's connections (a reader held open, and the one that takes the write lock). */
  private readonly conns = new Map<string, { reader: Database.Database; locker: Database.Database }>();
  private readonly shippedFrom = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly running = new Map<string, Promise<ShipResult>>();
  private readonly again = new Set<string>();
  private stopped = false;
  fault: ShipFault | undefined;
  readonly stats: CopyStats = { shipped: 0, failed: 0, generations: 0, checkpoints: 0, bytesShipped: 0, lags: [] };

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly engine: DatabaseEngine,
    readonly store: () => BlobStore,
    private readonly nodeId: string,
    readonly shipMs: number,
    private readonly log: { warn(obj: unknown, msg: string): void },
  ) {
    this.history = new HistoryRepo(db);
  }

  /** At start: every database this node holds is shipped (a new generation: the WAL may have been checkpointed at the last stop). */
  async resume(): Promise<void> {
    const rows = await this.db.selectFrom('databases').select(['id', 'copy_at']).where('node_id', '=', this.nodeId).execute();
    for (const r of rows) this.touch(r.id);
  }

  /** The database may have changed: ship its WAL within `shipMs` of the last ship. */
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

  /** Ships everything acknowledged until now (bookmarks, restores, the drain's final catch-up). */
  async shipNow(id: string): Promise<ShipResult> {
    const t = this.timers.get(id);
    if (t) clearTimeout(t);
    this.timers.delete(id);
    return this.ship(id, true);
  }

  /**
   * The file just installed is the history's state at `from` (a restore): a new generation stands on
   * that point instead of a snapshot of its own (docs/decisions.md), so the restore uploads one empty
   * segment, not the database. Called while requests on the database are paused.
   */
  async derive(id: string, from: Materialized): Promise<void> {
    await this.running.get(id)?.catch(() => {});
    const row = await this.db.selectFrom('databases').select(['copy_key']).where('id', '=', id).executeTakeFirst();
    const generation = newId('gen');
    const at = Date.now();
    const key = segmentKey(id, generation, 0, 0, WAL_HEADER_BYTES);
    const body = await gzip(Buffer.alloc(0), { level: 1 });
    await this.store().put(key, Readable.from([body]), { contentType: 'application/gzip', expectedSize: body.length });
    const g = from.generation;
    const ok = await this.index(id, row?.copy_key ?? null, key, async (trx) => {
      await trx
        .insertInto('database_generations')
        .values({ id: generation, database_id: id, snapshot_key: g.snapshot_key, page_size: g.page_size, started_at: at, snapshot_bytes: g.snapshot_bytes, base_generation_id: g.id, base_seq: from.last.seq })
        .execute();
      await trx
        .insertInto('database_segments')
        .values({ key, database_id: id, generation_id: generation, seq: 0, wal_index: 0, offset_start: WAL_HEADER_BYTES, offset_end: WAL_HEADER_BYTES, at, bytes: body.length })
        .execute();
    }, at);
    if (!ok) throw new Error(`database ${id} left this node during its restore`);
    await this.hold(id);
    this.positions.set(id, {
      generation,
      startedAt: at,
      // The next snapshot is due as if this generation had its base's (a restore replays the base's segments too).
      snapshotBytes: g.snapshot_bytes,
      walBytes: Math.max(0, from.bytes - g.snapshot_bytes),
      seq: 0,
      walIndex: 0,
      salt: null,
      offset: WAL_HEADER_BYTES,
      cksum: null,
      restartable: false,
      head: key,
      at,
    });
    this.shippedFrom.set(id, at);
  }

  /** Starts a new generation now (a snapshot, then segments after it). */
  async newGeneration(id: string): Promise<ShipResult> {
    await this.running.get(id)?.catch(() => {});
    this.positions.delete(id);
    return this.shipNow(id);
  }

  /** A ship is due or running (false: the history holds every change seen). */
  pending(id: string): boolean {
    return this.timers.has(id) || this.running.has(id) || this.again.has(id);
  }

  /**
   * This node took the database over: its file was built from the history up to `from.last` (the
   * row's head), so its next WAL continues that generation as the next WAL index. Without `from`
   * (a whole copy from before WAL shipping, or never shipped), the next ship starts a generation.
   */
  async adopted(id: string, from?: Materialized): Promise<void> {
    this.positions.delete(id);
    await this.hold(id);
    if (from) {
      const g = from.generation;
      this.positions.set(id, {
        generation: g.id,
        startedAt: g.started_at,
        snapshotBytes: g.snapshot_bytes,
        walBytes: 0,
        seq: from.last.seq,
        walIndex: from.last.wal_index + 1,
        salt: null,
        offset: WAL_HEADER_BYTES,
        cksum: null,
        restartable: false,
        head: from.last.key,
        at: from.at,
      });
    }
    this.touch(id);
  }

  /**
   * Opens this process's connections to a database whose file was just put in place, before anything
   * writes to it: an executor's close must never be the last one (it would checkpoint and delete a WAL
   * nobody read).
   */
  async hold(id: string): Promise<void> {
    this.connsOf(id, await this.engine.filePath(id));
  }

  /** The database left this node (deleted, moved, or its file is being replaced): nothing more from here. */
  async forget(id: string): Promise<void> {
    this.drop(id);
    await this.running.get(id)?.catch(() => {});
    this.drop(id);
  }

  private drop(id: string): void {
    const t = this.timers.get(id);
    if (t) clearTimeout(t);
    this.timers.delete(id);
    this.again.delete(id);
    this.shippedFrom.delete(id);
    this.positions.delete(id);
    this.closeConns(id);
  }

  /** Removes a deleted database's history (objects, then rows). */
  async removeHistory(id: string, legacyKey?: string | null): Promise<void> {
    const keys = await this.history.keys(id);
    if (legacyKey && !keys.includes(legacyKey)) keys.push(legacyKey);
    for (const key of keys) await this.store().delete(key).catch((err: unknown) => this.log.warn({ err, key }, 'removing a database history object failed'));
    await this.history.removeAll(id);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.running.values()]);
    for (const id of [...this.conns.keys()]) this.closeConns(id);
  }

  private closeConns(id: string): void {
    const c = this.conns.get(id);
    if (!c) return;
    this.conns.delete(id);
    for (const d of [c.locker, c.reader]) {
      try {
        if (d.inTransaction) d.exec('ROLLBACK');
        d.close();
      } catch {
        // Closing a connection of a file that is gone.
      }
    }
  }

  /**
   * This process's connections to the database. The reader has read once, so it holds its shared lock
   * until closed: an executor closing its connection is then never the last one (which would checkpoint
   * and delete the WAL). Opened with better-sqlite3, the only SQLite copy in this process: POSIX locks
   * are per process, and two SQLite libraries in one process would not see each other's.
   */
  private connsOf(id: string, file: string): { reader: Database.Database; locker: Database.Database } {
    let c = this.conns.get(id);
    if (c) return c;
    const reader = new Database(file, { fileMustExist: true, timeout: 0 });
    reader.pragma('wal_autocheckpoint=0');
    reader.prepare('SELECT count(*) FROM sqlite_schema').get();
    const locker = new Database(file, { fileMustExist: true, timeout: 0 });
    locker.pragma('wal_autocheckpoint=0');
    c = { reader, locker };
    this.conns.set(id, c);
    return c;
  }

  /** Ships of one database run one after the other (a ship asked for while one runs waits for it). */
  private ship(id: string, force = false): Promise<ShipResult> {
    const prev = this.running.get(id);
    const run: Promise<ShipResult> = (prev ? prev.catch(() => undefined) : Promise.resolve(undefined))
      .then(() => this.shipOnce(id, force))
      .finally(() => {
        if (this.running.get(id) === run) this.running.delete(id);
        if (this.again.delete(id)) this.touch(id);
      });
    this.running.set(id, run);
    run.catch((err: unknown) => {
      this.stats.failed++;
      this.stats.lastError = String(err);
      this.log.warn({ err, db: id }, 'shipping a database to the blob store failed');
      this.touch(id);
    });
    return run;
  }

  private async shipOnce(id: string, force: boolean): Promise<ShipResult> {
    const from = Date.now();
    const row = await this.db.selectFrom('databases').select(['copy_key', 'copy_at', 'node_id']).where('id', '=', id).executeTakeFirst();
    const file = await this.engine.filePath(id);
    if (!row || row.node_id !== this.nodeId || !existsSync(file)) {
      this.drop(id);
      return { key: row?.copy_key ?? null, at: from };
    }
    if (this.stopped && !force) return { key: row.copy_key, at: Number(row.copy_at ?? 0) };
    const conns = this.connsOf(id, file);
    let pos = this.positions.get(id);
    let changed = false;
    if (pos && pos.head !== row.copy_key) pos = undefined; // something else moved the head: start over
    const snapshotDue = pos && (pos.walBytes > Math.max(SNAPSHOT_MIN_WAL_BYTES, pos.snapshotBytes * SNAPSHOT_EVERY_FACTOR) || from - pos.startedAt > SNAPSHOT_EVERY_MS);
    if (!pos || snapshotDue) {
      pos = await this.startGeneration(id, file, row.copy_key);
      if (!pos) return this.lost(id);
      changed = true;
      // A whole copy from before WAL shipping: the generation replaces it.
      if (row.copy_key?.startsWith('database-copies/')) await this.store().delete(row.copy_key).catch(() => {});
    } else {
      const tail = await this.readNext(file, pos);
      if (tail === 'lost') {
        this.log.warn({ db: id }, 'the WAL went on without this node reading it (checkpointed elsewhere): a new generation');
        pos = await this.startGeneration(id, file, row.copy_key);
        if (!pos) return this.lost(id);
        changed = true;
      } else if (tail && tail.frames.length > 0) {
        if (!(await this.putSegment(id, pos, tail, from))) return this.lost(id);
        pos.restartable = false;
        changed = true;
      }
    }
    if (pos.offset > CHECKPOINT_BYTES) await this.checkpoint(id, file, pos, conns);
    this.positions.set(id, pos);
    this.shippedFrom.set(id, from);
    pos.at = from;
    // The size, for lists on other nodes: written only when something was shipped.
    if (changed) {
      const size = await this.engine.sizeBytes(id).catch(() => 0);
      await this.db.updateTable('databases').set({ size_bytes: size }).where('id', '=', id).where('node_id', '=', this.nodeId).where('copy_key', '=', pos.head).execute();
    }
    return { key: pos.head, at: from };
  }

  private async lost(id: string): Promise<ShipResult> {
    this.drop(id);
    return { key: null, at: Date.now() };
  }

  /** The WAL past `pos`: null when nothing new, 'lost' when it is another WAL that does not continue ours. */
  private async readNext(file: string, pos: Position): Promise<WalTail | null | 'lost'> {
    const wal = `${file}-wal`;
    if (pos.salt && pos.cksum) {
      const tail = await readWalTail(wal, { offset: pos.offset, cksum: pos.cksum });
      if (!tail) return 'lost';
      if (tail.header.salt1 === pos.salt[0] && tail.header.salt2 === pos.salt[1]) return tail;
      // SQLite restarted the WAL: it does so only after a checkpoint copied all of it, and adds one to salt1.
      if (!pos.restartable || tail.header.salt1 !== ((pos.salt[0] + 1) >>> 0)) return 'lost';
      pos.walIndex++;
    }
    const fresh = await readWalTail(wal);
    if (!fresh) return pos.salt ? 'lost' : null;
    pos.salt = [fresh.header.salt1, fresh.header.salt2];
    pos.offset = WAL_HEADER_BYTES;
    pos.cksum = fresh.header.cksum;
    return fresh;
  }

  /**
   * A new generation: the raw file (unchanged between our checkpoints, and only we checkpoint) copied
   * aside by a child process (closing a descriptor of the file in this process would drop this
   * process's SQLite locks on it), then the whole current WAL as segment 0. Applying the WAL again over
   * pages a checkpoint already copied gives the same pages, so file + segment 0 is the database as of
   * the read.
   */
  private async startGeneration(id: string, file: string, head: string | null): Promise<Position | undefined> {
    const generation = newId('gen');
    const staging = await this.engine.stagingPath(id);
    try {
      await copyFile(file, staging);
      const at = Date.now();
      const tail = await readWalTail(`${file}-wal`);
      const hdr = Buffer.alloc(100);
      const fh = await open(staging, 'r');
      try {
        await fh.read(hdr, 0, 100, 0);
      } finally {
        await fh.close();
      }
      const raw = hdr.readUInt16BE(16);
      const pageSize = tail?.header.pageSize ?? (raw === 1 ? 65536 : raw || 4096);
      const snapshotKey = `${HISTORY_PREFIX}/${id}/${generation}/snapshot.sqlite.gz`;
      const put = await this.store().put(snapshotKey, createReadStream(staging).pipe(createGzip({ level: 1 })), { contentType: 'application/gzip' });
      this.stats.bytesShipped += put.size;
      if (this.fault === 'after-snapshot-upload') process.kill(process.pid, 'SIGKILL');
      const pos: Position = {
        generation,
        startedAt: at,
        snapshotBytes: put.size,
        walBytes: 0,
        seq: 0,
        walIndex: 0,
        salt: tail ? [tail.header.salt1, tail.header.salt2] : null,
        offset: tail ? tail.end : WAL_HEADER_BYTES,
        cksum: tail ? tail.cksum : null,
        restartable: false,
        head: head ?? '',
        at,
      };
      const frames = tail?.frames ?? Buffer.alloc(0);
      const body = await gzip(frames, { level: 1 });
      const key = segmentKey(id, generation, 0, 0, WAL_HEADER_BYTES);
      await this.store().put(key, Readable.from([body]), { contentType: 'application/gzip', expectedSize: body.length });
      this.stats.bytesShipped += body.length;
      const ok = await this.index(id, head, key, async (trx) => {
        await trx.insertInto('database_generations').values({ id: generation, database_id: id, snapshot_key: snapshotKey, page_size: pageSize, started_at: at, snapshot_bytes: put.size }).execute();
        await trx
          .insertInto('database_segments')
          .values({ key, database_id: id, generation_id: generation, seq: 0, wal_index: 0, offset_start: WAL_HEADER_BYTES, offset_end: pos.offset, at, bytes: body.length })
          .execute();
      }, at);
      if (!ok) {
        await Promise.all([this.store().delete(snapshotKey), this.store().delete(key)]).catch(() => {});
        return undefined;
      }
      pos.head = key;
      this.stats.generations++;
      return pos;
    } finally {
      await rm(staging, { force: true });
    }
  }

  /** Uploads the frames of `tail` as the next segment and names it in the row; false when the database left this node. */
  private async putSegment(id: string, pos: Position, tail: WalTail, at: number): Promise<boolean> {
    const seq = pos.seq + 1;
    const key = segmentKey(id, pos.generation, seq, pos.walIndex, pos.offset);
    const body = await gzip(tail.frames, { level: 1 });
    await this.store().put(key, Readable.from([body]), { contentType: 'application/gzip', expectedSize: body.length });
    this.stats.bytesShipped += body.length;
    // Crash-safety test: the object is in the store, no row names it; the last indexed state stays readable.
    if (this.fault === 'after-segment-upload') process.kill(process.pid, 'SIGKILL');
    const ok = await this.index(id, pos.head, key, async (trx) => {
      await trx
        .insertInto('database_segments')
        .values({ key, database_id: id, generation_id: pos.generation, seq, wal_index: pos.walIndex, offset_start: pos.offset, offset_end: tail.end, at, bytes: body.length })
        .execute();
    }, at);
    if (!ok) {
      await this.store().delete(key).catch(() => {});
      return false;
    }
    pos.seq = seq;
    pos.offset = tail.end;
    pos.cksum = tail.cksum;
    pos.head = key;
    pos.walBytes += body.length;
    this.stats.shipped++;
    this.stats.lags.push(Date.now() - at);
    if (this.stats.lags.length > 1000) this.stats.lags.shift();
    return true;
  }

  /** Moves the row's head from `head` to `key` with the rows `rows` writes, in one transaction, while this node holds the database. */
  private async index(id: string, head: string | null, key: string, rows: (trx: Kysely<Tables>) => Promise<void>, at: number): Promise<boolean> {
    try {
      await this.db.transaction().execute(async (trx) => {
        let q = trx.updateTable('databases').set({ copy_key: key, copy_at: at }).where('id', '=', id).where('node_id', '=', this.nodeId);
        q = head === null || head === '' ? q.where('copy_key', 'is', null) : q.where('copy_key', '=', head);
        const r = await q.executeTakeFirst();
        if (Number(r.numUpdatedRows) === 0) throw new HeadMoved();
        await rows(trx);
      });
      return true;
    } catch (err) {
      if (err instanceof HeadMoved) return false;
      throw err;
    }
  }

  /**
   * Under the database's write lock (no commit can happen, so the WAL cannot grow or restart): reads
   * the tail, checkpoints, lets go, then ships the tail. Busy (a writer holds the lock): next time.
   */
  private async checkpoint(id: string, file: string, pos: Position, conns: { reader: Database.Database; locker: Database.Database }): Promise<void> {
    try {
      conns.locker.exec('BEGIN IMMEDIATE');
    } catch {
      return;
    }
    let tail: WalTail | null | 'lost';
    let full = false;
    try {
      tail = await this.readNext(file, pos);
      if (tail === 'lost') return;
      const r = conns.reader.pragma('wal_checkpoint(PASSIVE)') as { busy: number; log: number; checkpointed: number }[];
      full = r[0]?.busy === 0 && r[0].log === r[0].checkpointed;
    } finally {
      conns.locker.exec('ROLLBACK');
    }
    this.stats.checkpoints++;
    if (tail && tail.frames.length > 0 && !(await this.putSegment(id, pos, tail, Date.now()))) return;
    pos.restartable = full;
  }

  /**
   * Deletes generations no longer needed for the window starting at `windowStart`: one whose next
   * generation started before the window (that one's snapshot serves every point after it).
   */
  async prune(id: string, windowStart: number): Promise<number> {
    const gens = await this.history.generations(id);
    // Kept: the newest, and every one whose successor began inside the window; and whatever those stand on.
    const byId = new Map(gens.map((g) => [g.id, g]));
    const keep = new Set<string>();
    gens.forEach((g, i) => {
      const next = gens[i + 1];
      if (next && next.started_at <= windowStart) return;
      for (let c: typeof g | undefined = g; c && !keep.has(c.id); c = c.base_generation_id ? byId.get(c.base_generation_id) : undefined) keep.add(c.id);
    });
    let removed = 0;
    for (const g of gens) {
      if (keep.has(g.id)) continue;
      const segs = await this.history.segments(g.id);
      await this.history.removeGeneration(g.id);
      // A generation begun by a restore names its base's snapshot; only a root one owns its snapshot.
      const own = g.base_generation_id === null ? [g.snapshot_key] : [];
      for (const key of [...own, ...segs.map((s) => s.key)]) await this.store().delete(key).catch(() => {});
      removed++;
    }
    await this.db.deleteFrom('database_bookmarks').where('database_id', '=', id).where('at', '<', windowStart).execute();
    return removed;
  }
}


/** The retention job: runs on any node (it touches only rows and objects of past generations). */
export const PRUNE_JOB = 'databases.history.prune';
export const PRUNE_EVERY_MS = 3600_000;

/** Prunes every database's history to its owner's plan window (the hourly job's body). */
export async function pruneAll(copies: DatabaseCopies, db: Kysely<Tables>, historyDaysOf: (ownerId: string) => Promise<number>): Promise<number> {
  const rows = await db.selectFrom('databases').select(['id', 'owner_id']).execute();
  const days = new Map<string, number>();
  let removed = 0;
  for (const r of rows) {
    let d = days.get(r.owner_id);
    if (d === undefined) {
      d = await historyDaysOf(r.owner_id);
      days.set(r.owner_id, d);
    }
    removed += await copies.prune(r.id, Date.now() - d * 86_400_000);
  }
  return removed;
}

class HeadMoved extends Error {}

function segmentKey(id: string, generation: string, seq: number, walIndex: number, offset: number): string {
  return `${HISTORY_PREFIX}/${id}/${generation}/${String(seq).padStart(10, '0')}-${walIndex}-${offset}.wal.gz`;
}

/** cp in a child process: reflinks where the file system can (instant), a plain copy elsewhere. */
function copyFile(from: string, to: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('cp', ['--reflink=auto', from, to], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`cp failed (${code}): ${err}`))));
  });
}

/** Reads a gzip object of the history whole. */
export async function readObject(store: BlobStore, key: string): Promise<Buffer> {
  const got = await store.get(key);
  return Buffer.concat(await got.stream.toArray());
}
