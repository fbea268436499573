import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { assertDbId, dbFile, dbFiles } from './db-id.js';
import { DatabaseEngineError } from './errors.js';
import { ExecutorPool, type PoolStats } from './pool.js';
import type { HranaRequest, HranaResult } from './hrana-types.js';
import type { ImportRequest, ImportResult, QueryRequest, QueryResult } from './schemas.js';
import type { DatabaseEngine, DatabaseSnapshot, EmbeddedEngineOptions, RequestLimits } from './types.js';
import { type DatabaseUsage, UsageCounters } from './usage.js';
import { wireArgs } from './values.js';

/** One SQLite file per database in `dir`, SQL run by a pool of executor processes. */
export class EmbeddedDatabaseEngine implements DatabaseEngine {
  private readonly dir: string;
  private readonly exportDir: string;
  private readonly pool: ExecutorPool;
  private readonly counters: UsageCounters;
  private readonly timeoutMs: number;
  private readonly exportTimeoutMs: number;
  /** Open libSQL streams per database, so deleting a database closes their connections first. */
  private readonly streams = new Map<string, Set<string>>();

  constructor(opts: EmbeddedEngineOptions) {
    this.dir = path.resolve(opts.dir);
    this.exportDir = path.join(this.dir, '.exports');
    mkdirSync(this.exportDir, { recursive: true });
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.exportTimeoutMs = opts.exportTimeoutMs ?? 120_000;
    // One more executor than cores: a busy database keeps one executor busy (pipelining), a slow
    // query holds another, and starting a process then costs a core for hundreds of ms.
    const workers = opts.workers ?? Math.max(3, availableParallelism() + 1);
    this.pool = new ExecutorPool({
      size: workers,
      maxSize: Math.max(workers, opts.maxWorkers ?? workers * 2),
      perOwner: opts.maxWorkersPerOwner,
      maxQueuedPerOwner: opts.maxQueuedPerOwner,
      idleMs: opts.idleMs,
      maxWaitMs: opts.maxQueueWaitMs,
      settings: {
        synchronous: opts.synchronous ?? 'full',
        maxDatabaseBytes: opts.maxDatabaseBytes ?? 1024 ** 3,
        maxResultRows: opts.maxResultRows ?? 50_000,
        maxResultBytes: opts.maxResultBytes ?? 16 * 1024 ** 2,
        maxValueBytes: opts.maxValueBytes ?? 16 * 1024 ** 2,
        busyTimeoutMs: opts.busyTimeoutMs ?? 5000,
        autoCheckpoint: opts.autoCheckpoint ?? true,
        maxOpenConnections: opts.maxOpenConnections ?? 64,
      },
    });
    this.counters = new UsageCounters(this.dir);
  }

  async create(id: string, limits: Pick<RequestLimits, 'owner'> = {}): Promise<void> {
    const file = dbFile(this.dir, id);
    await this.pool.exclusive(
      id,
      async () => {
        if (existsSync(file))
          throw new DatabaseEngineError('DatabaseExists', `database ${id} already exists`);
        await this.pool.run({ op: 'create', db: id, path: file }, this.timeoutMs, null, limits.owner);
      },
      limits.owner,
    );
  }

  async delete(id: string): Promise<void> {
    assertDbId(id);
    await this.pool.exclusive(id, async () => {
      await this.closeConnections(id);
      await Promise.all(dbFiles(this.dir, id).map((f) => rm(f, { force: true })));
      this.counters.remove(id);
    });
  }

  /** Latest modification of the database file or its WAL (ms since the epoch); 0 when absent. */
  async changedAt(id: string): Promise<number> {
    const [main, wal] = dbFiles(this.dir, id);
    const times = await Promise.all(
      [main, wal].map((f) =>
        stat(f).then(
          (s) => s.mtimeMs,
          () => 0,
        ),
      ),
    );
    return Math.max(times[0], times[1]);
  }

  /** The database's file (its WAL is beside it, `-wal`): the history shipper reads both. */
  async filePath(id: string): Promise<string> {
    return dbFile(this.dir, id);
  }

  /** A fresh path inside the engine's directory where a copy to `install` can be written. */
  async stagingPath(id: string): Promise<string> {
    assertDbId(id);
    const dir = path.join(this.dir, '.staging');
    await mkdir(dir, { recursive: true });
    return path.join(dir, `${id}-${randomBytes(8).toString('hex')}.sqlite`);
  }

  /**
   * Makes the complete SQLite file at `source` (from `stagingPath`) the database `id`, replacing what
   * was there: on the database's lane, after every executor closed its connection to the old file.
   */
  async install(id: string, source: string): Promise<void> {
    assertDbId(id);
    await this.pool.exclusive(id, async () => {
      await this.closeConnections(id);
      await Promise.all(dbFiles(this.dir, id).map((f) => rm(f, { force: true })));
      await rename(source, dbFile(this.dir, id));
      this.counters.remove(id);
    });
  }

  /**
   * Moves a database's files out of the way into `<dir>/.stale/` (kept for an operator, never served):
   * a copy this node must no longer answer from, because the database lives on another node now.
   */
  async archive(id: string): Promise<void> {
    assertDbId(id);
    const dir = path.join(this.dir, '.stale');
    await mkdir(dir, { recursive: true });
    await this.pool.exclusive(id, async () => {
      await this.closeConnections(id);
      const stamp = Date.now();
      for (const f of dbFiles(this.dir, id)) {
        await rename(f, path.join(dir, `${stamp}-${path.basename(f)}`)).catch((e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw e;
        });
      }
      this.counters.remove(id);
    });
  }

  /** Ids of the databases whose files are in this engine's directory. */
  async localIds(): Promise<string[]> {
    return (await readdir(this.dir))
      .filter((f) => f.endsWith('.sqlite'))
      .map((f) => f.slice(0, -'.sqlite'.length));
  }

  private async closeConnections(id: string): Promise<void> {
    for (const stream of this.streams.get(id) ?? []) await this.pool.closeEverywhere(streamKey(id, stream));
    this.streams.delete(id);
    await this.pool.closeEverywhere(id);
  }

  async exists(id: string): Promise<boolean> {
    return existsSync(dbFile(this.dir, id));
  }

  async sizeBytes(id: string): Promise<number> {
    const [main, wal] = dbFiles(this.dir, id);
    const sizes = await Promise.all(
      [main, wal].map((f) =>
        stat(f).then(
          (s) => s.size,
          () => 0,
        ),
      ),
    );
    if (!existsSync(main)) throw notFound(id);
    return sizes[0] + sizes[1];
  }

  async usage(id: string): Promise<DatabaseUsage> {
    assertDbId(id);
    return this.counters.get(id);
  }

  async query(id: string, req: QueryRequest, limits: RequestLimits = {}): Promise<QueryResult> {
    const r = await this.pool.run<QueryResult>(
      { op: 'query', db: id, path: dbFile(this.dir, id), req: withWireArgs(req), maxBytes: limits.maxBytes },
      this.timeoutMs,
      id,
      limits.owner,
    );
    this.counters.add(id, r.rowsRead, r.rowsWritten);
    return r;
  }

  async batch(id: string, statements: QueryRequest[], limits: RequestLimits = {}): Promise<QueryResult[]> {
    const file = dbFile(this.dir, id);
    const rs = await this.pool.run<QueryResult[]>(
      {
        op: 'batch',
        db: id,
        path: file,
        statements: statements.map(withWireArgs),
        maxBytes: limits.maxBytes,
      },
      this.timeoutMs,
      id,
      limits.owner,
    );
    this.counters.add(
      id,
      rs.reduce((n, r) => n + r.rowsRead, 0),
      rs.reduce((n, r) => n + r.rowsWritten, 0),
    );
    return rs;
  }

  async import(id: string, req: ImportRequest, limits: RequestLimits = {}): Promise<ImportResult> {
    const file = dbFile(this.dir, id);
    const r = await this.pool.run<ImportResult>(
      {
        op: 'import',
        db: id,
        path: file,
        req: { ...req, rows: req.rows.map((r) => wireArgs(r)) },
        maxBytes: limits.maxBytes,
      },
      this.timeoutMs,
      id,
      limits.owner,
    );
    this.counters.add(id, 0, r.imported);
    return r;
  }

  /**
   * A stream's steps run on its own connection, on its own lane (so the database's other requests
   * are not queued behind an open transaction; SQLite's locks and busy timeout order them), pinned
   * to one executor for the stream's life. Without a stream they run on the database's lane.
   */
  async hrana(id: string, req: HranaRequest, limits: RequestLimits = {}): Promise<HranaResult> {
    const file = dbFile(this.dir, id);
    const key = req.stream === undefined ? id : streamKey(id, req.stream);
    if (req.stream !== undefined) {
      const open = this.streams.get(id) ?? new Set<string>();
      this.streams.set(id, open);
      open.add(req.stream);
    }
    const stream = req.stream !== undefined;
    const r = await this.pool.run<HranaResult>(
      {
        op: 'hrana',
        db: key,
        path: file,
        steps: req.steps,
        stream,
        resume: req.resume === true,
        maxBytes: limits.maxBytes,
      },
      this.timeoutMs,
      key,
      limits.owner,
    );
    this.counters.add(id, r.rowsRead, r.rowsWritten);
    return r;
  }

  async closeStream(id: string, stream: string): Promise<void> {
    const open = this.streams.get(id);
    if (!open?.delete(stream)) return;
    if (open.size === 0) this.streams.delete(id);
    await this.pool.closeEverywhere(streamKey(id, stream));
  }

  /** Not on the database's lane: VACUUM INTO reads a WAL snapshot while writes go on. */
  async export(id: string, limits: Pick<RequestLimits, 'owner'> = {}): Promise<DatabaseSnapshot> {
    const file = dbFile(this.dir, id);
    if (!existsSync(file)) throw notFound(id);
    const target = path.join(this.exportDir, `${id}-${randomBytes(8).toString('hex')}.sqlite`);
    try {
      await this.pool.run(
        { op: 'export', db: id, path: file, target },
        this.exportTimeoutMs,
        null,
        limits.owner,
      );
    } catch (err) {
      await rm(target, { force: true });
      throw err;
    }
    const { size } = await stat(target);
    return { path: target, sizeBytes: size, dispose: () => rm(target, { force: true }) };
  }

  /** Executor processes, how many are running a request, and requests waiting for one (GET /metrics). */
  get poolStats(): PoolStats {
    return this.pool.stats;
  }

  /** Process ids of the executors (tests check that ended ones are gone). */
  get executorPids(): number[] {
    return this.pool.pids;
  }

  async close(): Promise<void> {
    await this.pool.close();
    await this.counters.flush();
  }
}

function withWireArgs(req: QueryRequest): QueryRequest {
  const args = wireArgs(req.args);
  return args === req.args ? req : { ...req, args };
}

function streamKey(id: string, stream: string): string {
  return `${id}~${stream}`;
}

function notFound(id: string): DatabaseEngineError {
  return new DatabaseEngineError('DatabaseNotFound', `database ${id} not found`);
}
