import type { AreaModule } from '../area.js';
import { FileUrls, storesFromConfig } from './blobs.js';
import { fileChecks } from './doctor.js';
import { registerFileJobs } from './jobs.js';
import { registerFileMetrics } from './metrics.js';
import { filesOperations } from './operations.js';
import { join } from 'node:path';
import { Spool } from '../../platform/spool.js';
import { FileHls, JOB_HLS } from './hls.js';
import { HlsRepo, hlsMigrations } from './hls-repo.js';
import { hlsRoutes } from './hls-routes.js';
import { FilesRepo, fileWorkspaceMigrations, filesMigrations } from './repo.js';
import { fileRoutes } from './routes.js';
import { FilesService } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

export const filesArea: AreaModule = {
  name: 'files',
  operations: filesOperations,
  migrations: { ...filesMigrations, ...fileWorkspaceMigrations, ...hlsMigrations },
  create(deps, other) {
    const account = other.account;
    if (!account) throw new Error('the files area needs the account service (plans) to be created first');
    let files: FilesService | undefined;
    const urls = new FileUrls(deps.config.secret, deps.publicUrl, () => files?.now() ?? Date.now());
    files = new FilesService(
      new FilesRepo(deps.store.db),
      storesFromConfig(deps.config),
      urls,
      deps,
      async (ownerId) => {
        // getAccount reads only the owner id of the principal; the plan it returns is the stored one.
        const a = await account.getAccount({ scheme: 'owner', ownerId, plan: 'byte' });
        return a.plan.name;
      },
      (ownerId) => account.aiKeyFor(ownerId),
    );
    const f = files;
    files.hls = new FileHls(new HlsRepo(deps.store.db), {
      files: files.repo,
      stores: files.stores,
      jobs: deps.jobs,
      spool: new Spool(join(deps.config.dataDir, 'spool', 'hls')),
      planOf: f.planOf,
      publicUrl: deps.publicUrl,
      secret: deps.config.secret,
      now: () => f.now(),
      log: deps.log,
    });
    // Transcoding takes the host's cores: one at a time per node.
    deps.jobs.register<{ fileId: string }>(JOB_HLS, (p, job) => f.hls!.run(p.fileId, job), {
      concurrency: 1,
      leaseMs: 120_000,
      maxAttempts: 3,
    });
    registerFileJobs(deps.jobs, files, files.searchIndex);
    deps.usage.registerGauge('storageBytes', (ownerId) => (files as FilesService).repo.storedBytes(ownerId));
    registerFileMetrics(deps.metrics, files.repo);
    const repo = files.repo;
    // Only files not in the trash count; a forced delete sends them there, as DELETE /files/{id} does.
    deps.workspaces.register(
      tableHolder({
        area: 'files',
        param: 'fileId',
        deleteOperation: 'files.delete',
        db: deps.store.db,
        table: 'files',
        remove: (p, id) => f.delete(p, id),
        only: ['status', '=', 'DONE'],
        storageBytes: (ownerId) => repo.bytesByWorkspace(ownerId),
      }),
    );
    return { files };
  },
  doctor: fileChecks,
  // The local blob store (files, database copies and history, machine and volume backups, sites): each
  // region's directory as it is, without in-flight temp files. On S3 the objects stay where they are.
  backup: (config) => {
    const blob = config.files.blob;
    if (blob.backend !== 'local') return [];
    return Object.entries(blob.dirs).map(([region, dir]) => ({ name: `blobs-${region.toLowerCase()}`, dir, skip: /^~tmp$/ }));
  },
  routes(app, services) {
    fileRoutes(app, services.files.transfers);
    hlsRoutes(app, services.files.hls!);
  },
  async close(services) {
    services.files.stores.close();
  },
};
