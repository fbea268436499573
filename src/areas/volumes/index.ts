import type { AreaModule } from '../area.js';
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
    const volumes = new VolumesService(new VolumesRepo(deps.store.db), core.runtime.volumes, deps.nodes);
    // Sandboxes mount volumes through this binder and release them when their record goes.
    core.volumes = volumes;
    core.destroyHooks.push((row) => volumes.detach(row.id));
    const swept = await volumes.sweep(async (id) => (await core.repo.get(id)) !== undefined);
    if (swept) deps.log.warn({ sandboxes: swept }, 'volume mounts of sandboxes that are gone: released');
    return { volumes };
  },
};
