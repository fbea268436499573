import path from 'node:path';
import { z } from 'zod';
import { errors } from '../../platform/errors.js';
import { isRelayed } from '../../platform/node-forward.js';
import type { AreaModule } from '../area.js';
import { EmbeddedDatabaseEngine } from './engine/index.js';
import { databasesOperations } from './operations.js';
import { DatabaseCopies, databaseCopiesMigrations, PRUNE_EVERY_MS, PRUNE_JOB, pruneAll } from './copies.js';
import { PLANS } from '../../platform/plans.js';
import { databaseHistoryMigrations } from './history/history-repo.js';
import { ADOPT_PATH, type AdoptRequest, DatabaseMover } from './mover.js';
import { DatabasePlacement, databaseNodeMigrations } from './placement.js';
import { DatabasesRepo, databaseWorkspaceMigrations, databasesMigrations } from './repo.js';
import { mountLibsql } from './hrana/routes.js';
import { registerDatabaseMetrics } from './metrics.js';
import { DatabasesService } from './service.js';
import { DatabaseTokensRepo, databaseTokensMigrations } from './token-repo.js';
import { DatabaseTokens } from './tokens.js';
import { tableHolder } from '../../platform/workspaces.js';

/**
 * Per-database size cap of the engine (Cloudflare D1's figure). Below it, each request is capped at
 * what is left of the owner's plan storage (service.ts), which is the tighter limit on Byte and Mega.
 */
const ENGINE_CAP_BYTES = 10 * 1024 ** 3;

const adoptBodySchema = z.object({ from: z.string().min(1), key: z.string().min(1).nullable(), at: z.number().nullable(), prepare: z.boolean().optional() });

export const databasesArea: AreaModule = {
  name: 'databases',
  operations: databasesOperations,
  migrations: { ...databasesMigrations, ...databaseWorkspaceMigrations, ...databaseTokensMigrations, ...databaseNodeMigrations, ...databaseCopiesMigrations, ...databaseHistoryMigrations },
  async create(deps, other) {
    const { account, files } = other;
    if (!account || !files) throw new Error('the databases area needs the account and files services to be created first');
    const pool = deps.config.databases;
    const engine = new EmbeddedDatabaseEngine({
      dir: path.join(deps.config.dataDir, 'databases'),
      maxDatabaseBytes: ENGINE_CAP_BYTES,
      workers: pool.executorsMin,
      maxWorkers: pool.executorsMax,
      maxWorkersPerOwner: pool.executorsPerOwner,
      maxQueuedPerOwner: pool.queuePerOwner,
      idleMs: pool.executorIdleMs,
      maxQueueWaitMs: pool.queueWaitMs,
      // The history shipper checkpoints, after it shipped the frames (copies.ts).
      autoCheckpoint: false,
    });
    // Copies go to the blob store the files area configured (its default location): S3 or local.
    const store = () => files.stores.at();
    const copies = new DatabaseCopies(deps.store.db, engine, store, deps.nodes.id, pool.shipMs, deps.log);
    copies.fault = pool.shipFault;
    const databases = new DatabasesService(
      new DatabasesRepo(deps.store.db),
      engine,
      deps.events,
      deps.usage,
      ENGINE_CAP_BYTES,
      deps.publicUrl,
      new DatabaseTokens(new DatabaseTokensRepo(deps.store.db), (ownerId) => account.planOf(ownerId), deps.config.authCacheMs),
      new DatabasePlacement(deps.store.db, deps.nodes),
      copies,
    );
    databases.mover = new DatabaseMover(deps.store.db, engine, store, deps.nodes, deps.forwarder, copies, databases, deps.log);
    deps.auth.register(databases.tokens.resolver);
    await databases.placement.claimUnplaced(path.join(deps.config.dataDir, 'databases'));
    deps.forwarder.addLocator(databases.placement.locator());
    databases.placement.report();
    if (deps.nodes.holdsState) {
      // A file this node kept while it was taken for dead is set aside before anything serves it, and a
      // file missing from this node's disk is restored from its latest copy.
      await databases.mover.reconcile(true);
      await copies.resume();
      databases.mover.start(deps.config.nodes.heartbeatMs);
    }
    databases.workspaces = deps.workspaces;
    const repo = new DatabasesRepo(deps.store.db);
    deps.workspaces.register(
      tableHolder({
        area: 'databases',
        param: 'dbId',
        deleteOperation: 'databases.delete',
        db: deps.store.db,
        table: 'databases',
        remove: (p, id) => databases.delete(p, id),
        storageBytes: (ownerId) => repo.bytesByWorkspace(ownerId),
      }),
    );
    // History past each plan's window goes, hourly; the job enqueues its next run.
    deps.jobs.register(PRUNE_JOB, async () => {
      await pruneAll(copies, deps.store.db, async (ownerId) => PLANS[await account.planOf(ownerId)].databaseHistoryDays);
      await deps.jobs.enqueue(PRUNE_JOB, {}, { key: PRUNE_JOB, runAt: Date.now() + PRUNE_EVERY_MS, onDuplicate: 'replace' });
    });
    await deps.jobs.enqueue(PRUNE_JOB, {}, { key: PRUNE_JOB, runAt: Date.now() + PRUNE_EVERY_MS });
    deps.usage.registerGauge('databases', (ownerId) => databases.count(ownerId));
    deps.usage.registerGauge('storageBytes', (ownerId) => databases.storedBytes(ownerId));
    registerDatabaseMetrics(deps.metrics, engine);
    return { databases };
  },
  // One SQLite file per database, copied with the online backup API while executors write it; exports,
  // staging and set-aside files (dot directories) are not the databases. usage.json is the meters.
  backup: (config) => [{ name: 'databases', dir: path.join(config.dataDir, 'databases'), sqlite: /^[^/]+\.sqlite$/, skip: /^\./ }],
  routes(app, services, deps) {
    mountLibsql(app, services.databases, deps);
    // Another node hands a database over (restore after a death, drain): node credential only.
    app.post<{ Params: { id: string }; Body: AdoptRequest }>(ADOPT_PATH, async (req, reply) => {
      if (!isRelayed(req)) return reply.code(404).send(errors.notFound('route').toBody());
      const body = adoptBodySchema.parse(req.body);
      const ok = await services.databases.mover.adopt(req.params.id, body);
      return reply.code(ok ? 200 : 409).send({ ok });
    });
  },
  async close(services) {
    await services.databases.mover.stop();
    await services.databases.copies.stop();
    await services.databases.engine.close();
  },
};
