import { registerNodeJob } from '../../platform/node-held.js';
import type { AreaModule } from '../area.js';
import { BACKUP_JOB, RESTORE_JOB, VolumeBackups } from './backups.js';
import { volumesOperations } from './operations.js';
import { VolumesRepo, volumesMigrations } from './repo.js';
import { VolumesService } from './service.js';

export const volumesArea: AreaModule = {
  name: 'volumes',
  operations: volumesOperations,
  migrations: volumesMigrations,
  async create(deps, other) {
    if (!other.sandboxes) throw new Error('the volumes area needs the sandboxes service to be created first');
    const core = other.sandboxes.core;
    const repo = new VolumesRepo(deps.store.db);
    const store = core.runtime.volumes;
    // Backups go to the blob store the files area configured (its default location), as machines' do.
    // The files area is created after this one: `other` is the services object it lands in.
    const blobs = () => {
      if (!other.files) throw new Error('volume backups need the files area');
      return other.files.stores.at();
    };
    const backups = new VolumeBackups(
      repo,
      () => {
        if (!store) throw new Error('this sandbox driver keeps no volumes');
        return store;
      },
      blobs,
      deps.jobs,
      deps.nodes,
      deps.log,
    );
    const volumes = new VolumesService(repo, store, deps.nodes, backups);
    // Backups read the volume and restores write one: they run on the volume's node.
    const opts = { maxAttempts: 3, concurrency: 1, leaseMs: 60_000 };
    registerNodeJob<{ backupId: string }>(deps.jobs, deps.nodes, BACKUP_JOB, (j, ctx) => backups.run(j, ctx), opts);
    registerNodeJob<{ volumeId: string; backupId: string }>(
      deps.jobs,
      deps.nodes,
      RESTORE_JOB,
      (j, ctx) => backups.runRestore(j, ctx),
      opts,
    );
    // The plan's allowances shown in GET /account/usage (counted as the 402s count them).
    deps.usage.registerGauge('volumes', async (ownerId) => (await repo.totals(ownerId)).count);
    deps.usage.registerGauge('volumeBytes', async (ownerId) => (await repo.totals(ownerId)).bytes);
    // Sandboxes mount volumes through this binder and release them when their record goes.
    core.volumes = volumes;
    core.destroyHooks.push((row) => volumes.detach(row.id));
    const swept = await volumes.sweep(async (id) => (await core.repo.get(id)) !== undefined);
    if (swept) deps.log.warn({ sandboxes: swept }, 'volume mounts of sandboxes that are gone: released');
    return { volumes };
  },
};
