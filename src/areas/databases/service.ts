import type { Principal } from '../../platform/auth.js';
import type { Outbox } from '../../platform/outbox.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { assertWithinAllowance } from '../../platform/limits.js';
import { PLANS } from '../../platform/plans.js';
import type { Usage } from '../../platform/usage.js';
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
}

export type QueryBody = QueryRequest | { statements: QueryRequest[] } | ImportRequest;

/** How long a computed storage cap is reused: a query must not pay for a storage sum each time. */
const CAP_TTL_MS = 1000;

export class DatabasesService {
  /**
   * dbId -> owner, for rows of this node this process has seen; DELETE evicts. Saves a store round
   * trip per query.
   */
  private readonly owners = new Map<string, string>();
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
  ) {}

  async list(p: Principal): Promise<{ items: DatabaseOut[] }> {
    const rows = await this.repo.list(p.ownerId);
    return { items: await Promise.all(rows.map((r) => this.out(r))) };
  }

  async get(p: Principal, id: string): Promise<DatabaseOut> {
    return this.out(await this.row(p, id));
  }

  async create(p: Principal, input: { name: string; description?: string }): Promise<DatabaseOut> {
    assertWithinAllowance(p.plan, 'databases', await this.repo.count(p.ownerId));
    // The scheduler picks the node; another node's create is relayed there (ElsewhereError).
    const nodeId = await this.placement.place(p.ownerId);
    const row: DatabaseRow = {
      id: newId('db'),
      owner_id: p.ownerId,
      name: input.name,
      description: input.description ?? null,
      created_at: Date.now(),
      node_id: nodeId,
    };
    // The file first, then the row and database.created in one commit: a crash in between leaves an
    // unreferenced file, never a database (or an acknowledged create) without its event.
    try {
      await this.engine.create(row.id, { owner: p.ownerId });
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
    return db;
  }

  /** Files first, row last: a failure in between leaves a row whose DELETE can be retried. */
  async delete(p: Principal, id: string): Promise<{ ok: true }> {
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id);
    const db = await this.out(row);
    this.owners.delete(id);
    this.caps.delete(id);
    await this.engine.delete(id);
    await this.events.atomically(async (trx, emit) => {
      await this.tokens.deleteAll(p.ownerId, id, trx);
      if (await this.repo.delete(p.ownerId, id, trx)) emit({ event: 'database.deleted', ownerId: p.ownerId, data: { ...db, sizeBytes: 0 } });
    });
    return { ok: true };
  }

  async query(p: Principal, id: string, body: QueryBody): Promise<QueryResult | BatchResult | ImportResult> {
    await this.assertAccess(p, id);
    const limits = { maxBytes: await this.capFor(p, id), owner: p.ownerId };
    try {
      if ('statements' in body) return { results: await this.engine.batch(id, body.statements, limits) };
      if ('table' in body) return await this.engine.import(id, body, limits);
      return await this.engine.query(id, body, limits);
    } catch (err) {
      this.caps.delete(id);
      throw this.map(err, p, limits.maxBytes);
    }
  }

  /**
   * libSQL Hrana steps (hrana/pipeline.ts): same ownership check, storage cap, executors, limits and
   * error mapping as `query`. SQL errors come back inside the result, per step, as Hrana wants them.
   */
  async hrana(p: Principal, id: string, req: HranaRequest): Promise<HranaResult> {
    await this.assertAccess(p, id);
    const limits = { maxBytes: await this.capFor(p, id), owner: p.ownerId };
    try {
      return await this.engine.hrana(id, req, limits);
    } catch (err) {
      this.caps.delete(id);
      throw this.map(err, p, limits.maxBytes);
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
    await this.placement.assertHere(row.node_id);
    try {
      return { name: row.name, snapshot: await this.engine.export(id, { owner: p.ownerId }) };
    } catch (err) {
      throw this.map(err, p);
    }
  }

  count(ownerId: string): Promise<number> {
    return this.repo.count(ownerId);
  }

  /** Bytes on disk of all the owner's databases (the storageBytes gauge adds files to it). */
  async storedBytes(ownerId: string): Promise<number> {
    const rows = await this.repo.list(ownerId);
    const sizes = await Promise.all(rows.map((r) => this.sizeOf(r.id)));
    return sizes.reduce((a, b) => a + b, 0);
  }

  private async row(p: Principal, id: string): Promise<DatabaseRow> {
    const row = await this.repo.get(p.ownerId, id);
    if (!row) throw errors.notFound('database');
    if (!row.node_id || row.node_id === this.placement.here) this.owners.set(id, row.owner_id);
    return row;
  }

  private async assertOwned(p: Principal, id: string): Promise<void> {
    if (this.owners.get(id) === p.ownerId) return;
    const row = await this.row(p, id);
    await this.placement.assertHere(row.node_id);
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
      this.sizeOf(r.id),
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
    };
  }
}

function nameTaken(name: string) {
  return errors.conflict(`a database named ${name} already exists`, 'DatabaseNameTaken', { name });
}
