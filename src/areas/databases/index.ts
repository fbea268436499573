import path from 'node:path';
import type { AreaModule } from '../area.js';
import { EmbeddedDatabaseEngine } from './engine/index.js';
import { databasesOperations } from './operations.js';
import { DatabasePlacement, databaseNodeMigrations } from './placement.js';
import { DatabasesRepo, databasesMigrations } from './repo.js';
import { mountLibsql } from './hrana/routes.js';
import { registerDatabaseMetrics } from './metrics.js';
import { DatabasesService } from './service.js';
import { DatabaseTokensRepo, databaseTokensMigrations } from './token-repo.js';
import { DatabaseTokens } from './tokens.js';

/**
 * Per-database size cap of the engine (Cloudflare D1's figure). Below it, each request is capped at
 * what is left of the owner's plan storage (service.ts), which is the tighter limit on Byte and Mega.
 */
const ENGINE_CAP_BYTES = 10 * 1024 ** 3;

export const databasesArea: AreaModule = {
  name: 'databases',
  operations: databasesOperations,
  migrations: { ...databasesMigrations, ...databaseTokensMigrations, ...databaseNodeMigrations },
  async create(deps, other) {
    const account = other.account;
    if (!account) throw new Error('the databases area needs the account service to be created first');
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
    });
    const databases = new DatabasesService(
      new DatabasesRepo(deps.store.db),
      engine,
      deps.events,
      deps.usage,
      ENGINE_CAP_BYTES,
      deps.publicUrl,
      new DatabaseTokens(new DatabaseTokensRepo(deps.store.db), (ownerId) => account.planOf(ownerId), deps.config.authCacheMs),
      new DatabasePlacement(deps.store.db, deps.nodes),
    );
    deps.auth.register(databases.tokens.resolver);
    await databases.placement.claimUnplaced(path.join(deps.config.dataDir, 'databases'));
    deps.forwarder.addLocator(databases.placement.locator());
    databases.placement.report();
    deps.usage.registerGauge('databases', (ownerId) => databases.count(ownerId));
    deps.usage.registerGauge('storageBytes', (ownerId) => databases.storedBytes(ownerId));
    registerDatabaseMetrics(deps.metrics, engine);
    return { databases };
  },
  routes(app, services, deps) {
    mountLibsql(app, services.databases, deps);
  },
  async close(services) {
    await services.databases.engine.close();
  },
};
