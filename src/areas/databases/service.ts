import type { Principal } from '../../platform/auth.js';
import type { Outbox } from '../../platform/outbox.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { assertWithinAllowance } from '../../platform/limits.js';
import { PLANS } from '../../platform/plans.js';
import type { Usage } from '../../platform/usage.js';
import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import type {
  BatchResult,
  DatabaseEngine,
  DatabaseSnapshot,
  HranaRequest,
  HranaResult,
  ImportRequest,
  ImportResult,
  QueryRequest,
  QueryResult,
} from './engine/index.js';
import { toApiError } from './engine-errors.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { DatabaseCopies } from './copies.js';
import type { BookmarkRow } from './history/history-repo.js';
import { materialize } from './history/materialize.js';
import { rm } from 'node:fs/promises';
import type { DatabaseMover } from './mover.js';
import type { DatabasePlacement } from './placement.js';
import type { DatabaseRow, DatabasesRepo } from './repo.js';
import type { DatabaseTokenOut, DatabaseTokens } from './tokens.js';

export interface DatabaseOut {
  id: string;
  name: string;
  description: string | null;
  sizeBytes: number;
  rowsRead: number;
  rowsWritten: number;
  createdAt: string;
  libsqlUrl: string;
  workspaceId: string;
}

export interface BookmarkOut {
  id: string;
  databaseId: string;
  name: string | null;
  at: string;
  createdAt: string;
}

function bookmarkOut(r: BookmarkRow): BookmarkOut {
  return { id: r.id, databaseId: r.database_id, name: r.name, at: new Date(Number(r.at)).toISOString(), createdAt: new Date(Number(r.created_at)).toISOString() };
}

export type QueryBody = QueryRequest | { statements: QueryRequest[] } | ImportRequest;

/** How long a computed storage cap is reused: a query must not pay for a storage sum each time. */
const CAP_TTL_MS = 1000;
/**
 * How long a database seen here is served without reading its row again: a database can move to another
 * node (drain, restore after this node was taken for dead), and this bounds how long a node that did not
 * move it could answer from its old file (the node that moves it forgets at once).
 */
const OWNER_TTL_MS = 2000;
/** A request arriving while its database moves waits at most this long for the switch. */
const MOVE_WAIT_MS = 30_000;

export class DatabasesService {
  /**
   * dbId -> owner, for rows of this node this process has seen; DELETE evicts. Saves a store round
   * trip per query.
   */
  private readonly owners = new Map<string, { owner: string; until: number }>();
  /** Databases being moved off this node: requests wait for the switch, then follow the database. */
  private readonly moving = new Map<string, Promise<void>>();
  /** Requests running on each database here, so a move's final copy waits for them. */
  private readonly inflight = new Map<string, number>();
  private readonly idle = new Map<string, () => void>();
  /**
   * Databases a move handed to another node. A request that checked ownership before the move's pause
   * and reached `enter` after its release must not run on the old file (acknowledged there, then lost
   * with it): it checks again and follows the database.
   */
  private readonly departed = new Set<string>();
  /** Restores and moves databases between nodes (set by the area once the service exists). */
  mover!: DatabaseMover;
  /** Workspaces (set by the area): where a database lands, which a list shows, which a key reaches. */
  workspaces!: WorkspaceRegistry;
  private readonly caps = new Map<string, { cap: number; until: number }>();

  constructor(
    private readonly repo: DatabasesRepo,
    readonly engine: DatabaseEngine,
    private readonly events: Outbox,
    private readonly usage: Usage,
    /** The engine's own per-database size cap. */
    readonly engineCapBytes: number,
    /** Base URL clients reach nube at (for `libsqlUrl`). */
    private readonly publicUrl: () => string,
    readonly tokens: DatabaseTokens,
    readonly placement: DatabasePlacement,
    readonly copies: DatabaseCopies,
  ) {}

  async list(p: Principal, workspaceId?: string): Promise<{ items: DatabaseOut[] }> {
    const rows = await this.repo.list(p.ownerId, await this.workspaces.filter(p, workspaceId));
    return { items: await Promise.all(rows.map((r) => this.out(r))) };
  }

  async get(p: Principal, id: string): Promise<DatabaseOut> {
    return this.out(await this.row(p, id));
  }

  async create(p: Principal, input: { name: string; description?: string; workspaceId?: string; from?: { databaseId: string; at?: string } }): Promise<DatabaseOut> {
    const workspaceId = await this.workspaces.forCreate(p, input.workspaceId);
    if (input.from) return this.branch(p, { ...input, from: input.from }, workspaceId);
    assertWithinAllowance(p.plan, 'databases', await this.repo.count(p.ownerId));
    // The scheduler picks the node; another node's create is relayed there (ElsewhereError).
    const nodeId = await this.placement.place(p.ownerId);
    return this.insertNew(p, input, nodeId, workspaceId);
  }

  /**
   * A new database from another one's history at `from.at` (default now), built on the source's node
   * (the create is relayed there) from its snapshot and segments; independent afterwards (its own
   * generation, a snapshot of its own at its first ship).
   */
  private async branch(p: Principal, input: { name: string; description?: string; from: { databaseId: string; at?: string } }, workspaceId: DatabaseRow['workspace_id']): Promise<DatabaseOut> {
    const src = await this.row(p, input.from.databaseId);
    const count = await this.repo.count(p.ownerId);
    const allowed = PLANS[p.plan].databases;
    if (count >= allowed) {
      throw errors.paymentRequired(`your ${PLANS[p.plan].title} plan allows ${allowed} databases; a branch is one more: delete one or change plan`, 'PlanLimitReached', { limit: allowed, current: count });
    }
    await this.placement.assertHere(src.node_id, src.id);
    const at = input.from.at === undefined ? Date.now() : this.pointIn(input.from.at, await this.historyWindow(p, src.id), ['from', 'at']);
    await this.copies.shipNow(src.id);
    const id = newId('db');
    const staging = await this.engine.stagingPath(id);
    try {
      await materialize(this.copies.store(), this.copies.history, src.id, { at }, staging);
      await this.engine.install(id, staging);
    } finally {
      await rm(staging, { force: true });
    }
    return this.insertNew(p, input, this.placement.here, workspaceId, id, true);
  }

  /** `iso` as ms, 400 unless inside `w` (issues at `path`). */
  private pointIn(iso: string, w: { from: number; to: number }, path: string[]): number {
    const at = Date.parse(iso);
    if (Number.isNaN(at)) throw errors.badRequest('the time must be ISO 8601', [{ path, message: 'not an ISO 8601 time' }]);
    const windowText = `${new Date(w.from).toISOString()} to ${new Date(w.to).toISOString()}`;
    if (at > w.to) {
      throw errors.badRequest(`that time is in the future; this database can be restored to a time from ${windowText}`, [{ path, message: 'in the future' }], 'RestorePointInFuture');
    }
    if (at < w.from) {
      const msg = `that time is outside the window this database's history covers: ${windowText}`;
      throw errors.badRequest(msg, [{ path, message: msg }], 'RestorePointOutsideWindow');
    }
    return at;
  }

  private async insertNew(
    p: Principal,
    input: { name: string; description?: string },
    nodeId: string,
    workspaceId: DatabaseRow['workspace_id'],
    id = newId('db'),
    installed = false,
  ): Promise<DatabaseOut> {
    const row: DatabaseRow = {
      id,
      owner_id: p.ownerId,
      name: input.name,
      description: input.description ?? null,
      created_at: Date.now(),
      node_id: nodeId,
      size_bytes: 0,
      copy_key: null,
      copy_at: null,
      claim_node: null,
      claim_until: null,
      workspace_id: workspaceId,
    };
    // The file first, then the row and database.created in one commit: a crash in between leaves an
    // unreferenced file, never a database (or an acknowledged create) without its event.
    try {
      if (!installed) await this.engine.create(row.id, { owner: p.ownerId });
    } catch (err) {
      throw this.map(err, p);
    }
    const db = await this.out(row);
    try {
      await this.events.atomically(async (trx, emit) => {
        await this.repo.insert(row, trx);
        emit({ event: 'database.created', ownerId: p.ownerId, data: { ...db } });
      });
    } catch (err) {
      await this.engine.delete(row.id).catch(() => {});
      if (isUniqueViolation(err)) throw nameTaken(input.name);
      throw err;
    }
    // Its first copy: a database restored after this node's death exists on the other node.
    this.copies.touch(row.id);
    return db;
  }

  /** Files first, row last: a failure in between leaves a row whose DELETE can be retried. */
  async delete(p: Principal, id: string): Promise<{ ok: true }> {
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id, id);
    const db = await this.out(row);
    await this.enter(p, id);
    try {
      this.owners.delete(id);
      this.caps.delete(id);
      await this.copies.forget(id);
      await this.engine.delete(id);
      await this.events.atomically(async (trx, emit) => {
        await this.tokens.deleteAll(p.ownerId, id, trx);
        if (await this.repo.delete(p.ownerId, id, trx)) emit({ event: 'database.deleted', ownerId: p.ownerId, data: { ...db, sizeBytes: 0 } });
      });
    } finally {
      this.leave(id);
    }
    await this.copies.removeHistory(id, row.copy_key);
    return { ok: true };
  }

  async query(p: Principal, id: string, body: QueryBody): Promise<QueryResult | BatchResult | ImportResult> {
    await this.assertAccess(p, id);
    const limits = { maxBytes: await this.capFor(p, id), owner: p.ownerId };
    await this.enter(p, id);
    try {
      if ('statements' in body) return { results: await this.engine.batch(id, body.statements, limits) };
      if ('table' in body) return await this.engine.import(id, body, limits);
      return await this.engine.query(id, body, limits);
    } catch (err) {
      this.caps.delete(id);
      throw this.map(err, p, limits.maxBytes);
    } finally {
      this.leave(id);
    }
  }

  /**
   * libSQL Hrana steps (hrana/pipeline.ts): same ownership check, storage cap, executors, limits and
   * error mapping as `query`. SQL errors come back inside the result, per step, as Hrana wants them.
   */
  async hrana(p: Principal, id: string, req: HranaRequest): Promise<HranaResult> {
    await this.assertAccess(p, id);
    const limits = { maxBytes: await this.capFor(p, id), owner: p.ownerId };
    await this.enter(p, id);
    try {
      return await this.engine.hrana(id, req, limits);
    } catch (err) {
      this.caps.delete(id);
      throw this.map(err, p, limits.maxBytes);
    } finally {
      this.leave(id);
    }
  }

  /** Ends a libSQL stream's connection (its open transaction rolls back). */
  closeStream(id: string, stream: string): Promise<void> {
    return this.engine.closeStream(id, stream);
  }

  /** A token for SQL on this one database (shown once; only its hash is kept). */
  async createToken(p: Principal, id: string, name?: string): Promise<DatabaseTokenOut & { token: string }> {
    await this.row(p, id);
    return this.tokens.create(p, id, name);
  }

  async listTokens(p: Principal, id: string): Promise<{ items: DatabaseTokenOut[] }> {
    await this.row(p, id);
    return this.tokens.list(p, id);
  }

  async revokeToken(p: Principal, id: string, tokenId: string): Promise<{ ok: true }> {
    await this.row(p, id);
    return this.tokens.revoke(p, id, tokenId);
  }

  /** 404 unless the database is the caller's (and, for a database token, the one it names). */
  async assertAccess(p: Principal, id: string): Promise<void> {
    if (p.resourceId !== undefined && p.resourceId !== id) throw errors.notFound('database');
    await this.assertOwned(p, id);
  }

  /** A consistent copy of the file; the caller streams it and then calls `dispose()`. */
  async export(p: Principal, id: string): Promise<{ name: string; snapshot: DatabaseSnapshot }> {
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id, id);
    await this.enter(p, id);
    try {
      return { name: row.name, snapshot: await this.engine.export(id, { owner: p.ownerId }) };
    } catch (err) {
      throw this.map(err, p);
    } finally {
      this.leave(id);
    }
  }

  /** The span of time a restore may name: from the oldest point kept to now. */
  async historyWindow(p: Principal, id: string): Promise<{ from: number; to: number }> {
    const now = Date.now();
    const gens = await this.copies.history.generations(id);
    const oldest = gens[0]?.started_at ?? now;
    return { from: Math.max(oldest, now - PLANS[p.plan].databaseHistoryDays * 86_400_000), to: now };
  }

  async listBookmarks(p: Principal, id: string): Promise<{ items: BookmarkOut[]; window: { from: string; to: string } }> {
    await this.row(p, id);
    const [rows, w] = await Promise.all([this.copies.history.bookmarks(id), this.historyWindow(p, id)]);
    return { items: rows.map(bookmarkOut), window: { from: new Date(w.from).toISOString(), to: new Date(w.to).toISOString() } };
  }

  /** Names this moment: everything acknowledged before the call is shipped first, so a restore reaches it. */
  async createBookmark(p: Principal, id: string, name?: string): Promise<BookmarkOut> {
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id, id);
    const shipped = await this.copies.shipNow(id);
    if (!shipped.key) throw errors.unavailable('this database has no history yet; retry in a moment', 1);
    const bm = { id: newId('bkm'), database_id: id, owner_id: p.ownerId, name: name ?? null, at: shipped.at, created_at: Date.now() };
    await this.copies.history.addBookmark(bm);
    return bookmarkOut(bm);
  }

  /**
   * Puts the database back as it was at `at` (or a bookmark's time). The restore is itself a point in
   * history: the state just before it is shipped and bookmarked first (the answer's `undo`), and the
   * restored file starts a new generation.
   */
  async restore(p: Principal, id: string, target: { at?: string; bookmark?: string }): Promise<{ restoredTo: string; undo: BookmarkOut }> {
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id, id);
    const w = await this.historyWindow(p, id);
    let at: number;
    if (target.bookmark === undefined) at = this.pointIn(target.at as string, w, ['at']);
    else {
      const bm = await this.copies.history.bookmark(id, target.bookmark);
      if (!bm) throw errors.notFound('bookmark');
      at = bm.at;
    }
    if (at < w.from) throw errors.badRequest('that bookmark is older than the history kept', [{ path: ['bookmark'], message: 'outside the window' }], 'RestorePointOutsideWindow');
    // Everything acknowledged until now is in the history (the point reaches it, and undo needs it).
    await this.copies.shipNow(id);
    const staging = await this.engine.stagingPath(id);
    try {
      const built = await materialize(this.copies.store(), this.copies.history, id, { at }, staging);
      const gate = await this.pause(id);
      let undo: BookmarkOut;
      try {
        const before = await this.copies.shipNow(id);
        const bm = { id: newId('bkm'), database_id: id, owner_id: p.ownerId, name: `before restore to ${new Date(at).toISOString()}`, at: before.at, created_at: Date.now() };
        await this.copies.history.addBookmark(bm);
        undo = bookmarkOut(bm);
        await this.copies.forget(id);
        await this.engine.install(id, staging);
        this.caps.delete(id);
        // A new generation at once, standing on the point restored (nothing re-uploaded).
        await this.copies.derive(id, built);
      } finally {
        gate.release();
      }
      return { restoredTo: new Date(built.at).toISOString(), undo };
    } finally {
      await rm(staging, { force: true });
    }
  }

  /**
   * Stops new requests on a database held here (they wait) and resolves once those running finished:
   * the moment for a move's final copy. `release(to)` ends the pause: with `to`, the database now
   * lives there and the waiting requests follow it; without, they run here as before.
   */
  async pause(id: string): Promise<{ release(to?: string): void }> {
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    this.moving.set(id, gate);
    if ((this.inflight.get(id) ?? 0) > 0) await new Promise<void>((r) => this.idle.set(id, r));
    return {
      release: (to?: string) => {
        if (to) {
          this.owners.delete(id);
          this.caps.delete(id);
          this.placement.moved(id, to);
          if (this.departed.size > 10_000) this.departed.clear();
          this.departed.add(id);
        }
        this.moving.delete(id);
        open();
      },
    };
  }

  /** A database left this node (another took it over): forget what was cached about it. */
  forgetLocal(id: string): void {
    this.owners.delete(id);
    this.caps.delete(id);
    // `departed` stays: a mover pass archiving the old file calls this too, and a request held since
    // before the move must still check again (enter clears it once the row names this node).
  }

  count(ownerId: string): Promise<number> {
    return this.repo.count(ownerId);
  }

  /**
   * Bytes of all the owner's databases (the storageBytes gauge adds files to it): measured for those
   * held here, as their holder last reported for the others.
   */
  async storedBytes(ownerId: string): Promise<number> {
    const rows = await this.repo.list(ownerId);
    const sizes = await Promise.all(rows.map((r) => this.sizeOfRow(r)));
    return sizes.reduce((a, b) => a + b, 0);
  }

  private async row(p: Principal, id: string): Promise<DatabaseRow> {
    const row = await this.repo.get(p.ownerId, id);
    if (!row || !this.workspaces.sees(p, row.workspace_id)) throw errors.notFound('database');
    return row;
  }

  private async assertOwned(p: Principal, id: string): Promise<void> {
    const hit = this.owners.get(id);
    if (hit && hit.owner === p.ownerId && hit.until > Date.now()) return this.placement.assertServing();
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id, id);
    this.placement.assertServing();
    this.owners.set(id, { owner: row.owner_id, until: Date.now() + OWNER_TTL_MS });
  }

  /**
   * Counts a request on a database held here; while it moves, waits for the switch and then sends the
   * request after it (ElsewhereError, relayed by the REST layer). Synchronous after the last await, so
   * a move's pause never misses a request that passed the gate.
   */
  private async enter(p: Principal, id: string): Promise<void> {
    const gate = this.moving.get(id);
    if (gate) {
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<void>((_, reject) => {
        timer = setTimeout(() => reject(errors.unavailable('this database is moving to another node; retry', 1)), MOVE_WAIT_MS);
      });
      try {
        await Promise.race([gate, waited]);
      } finally {
        clearTimeout(timer);
      }
      await this.assertOwned(p, id);
      return this.enter(p, id);
    }
    if (this.departed.has(id)) {
      // Moved away after this request checked: the row names the new node now (ElsewhereError relays).
      this.owners.delete(id);
      await this.assertOwned(p, id);
      this.departed.delete(id); // the row names this node again: it came back
      return this.enter(p, id);
    }
    this.inflight.set(id, (this.inflight.get(id) ?? 0) + 1);
  }

  private leave(id: string): void {
    const n = (this.inflight.get(id) ?? 1) - 1;
    if (n > 0) {
      this.inflight.set(id, n);
      return;
    }
    this.inflight.delete(id);
    const idle = this.idle.get(id);
    if (idle) {
      this.idle.delete(id);
      idle();
    }
    // A request may have written: the database's next copy is due (copies.ts skips unchanged ones).
    this.copies.touch(id);
  }

  /**
   * What this database may grow to: the plan's storage minus everything else the owner stores
   * (files and other databases). The engine applies it as max_page_count for the request.
   */
  private async capFor(p: Principal, id: string): Promise<number> {
    const now = Date.now();
    const hit = this.caps.get(id);
    if (hit && hit.until > now) return hit.cap;
    const [total, own] = await Promise.all([this.usage.gauge('storageBytes', p.ownerId), this.sizeOf(id)]);
    const cap = Math.min(this.engineCapBytes, Math.max(0, PLANS[p.plan].storageBytes - (total - own)));
    this.caps.set(id, { cap, until: now + CAP_TTL_MS });
    return cap;
  }

  private sizeOf(id: string): Promise<number> {
    return this.engine.sizeBytes(id).catch(() => 0);
  }

  /** Measured when the file is here; otherwise what its holder last wrote in the row. */
  private sizeOfRow(r: DatabaseRow): Promise<number> {
    if (!r.node_id || r.node_id === this.placement.here) return this.sizeOf(r.id);
    return Promise.resolve(Number(r.size_bytes));
  }

  private map(err: unknown, p: Principal, capBytes?: number): unknown {
    const plan = PLANS[p.plan];
    return toApiError(err, {
      capBytes,
      engineCapBytes: this.engineCapBytes,
      planTitle: plan.title,
      planStorageBytes: plan.storageBytes,
    });
  }

  private async out(r: DatabaseRow): Promise<DatabaseOut> {
    const [sizeBytes, usage] = await Promise.all([
      this.sizeOfRow(r),
      this.engine.usage(r.id).catch(() => ({ rowsRead: 0, rowsWritten: 0 })),
    ]);
    return {
      id: r.id,
      name: r.name,
      description: r.description,
      sizeBytes,
      rowsRead: usage.rowsRead,
      rowsWritten: usage.rowsWritten,
      createdAt: new Date(Number(r.created_at)).toISOString(),
      libsqlUrl: `${this.publicUrl()}/libsql/${r.id}/`,
      workspaceId: r.workspace_id,
    };
  }
}

function nameTaken(name: string) {
  return errors.conflict(`a database named ${name} already exists`, 'DatabaseNameTaken', { name });
}
