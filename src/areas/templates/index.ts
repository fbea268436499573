import type { AreaModule } from '../area.js';
import { refuseProtected } from '../sandboxes/manage.js';
import { templatesOperations } from './operations.js';
import { TemplatesRepo, templatesMigrations } from './repo.js';
import { BUILD_JOB, type BuildJob, TemplatesService } from './service.js';

export const templatesArea: AreaModule = {
  name: 'templates',
  operations: templatesOperations,
  migrations: templatesMigrations,
  // A template's recipe is its row plus its build context (a Dockerfile's directory, by SHA-256): both
  // are kept, so a restored nube can build it again; the built root filesystem and layers are not.
  backup: (config) => [{ name: 'template-contexts', dir: `${config.templates.blobDir}/contexts`, skip: /\.tmp$/ }],
  create(deps, other) {
    const { sandboxes } = other;
    if (!sandboxes) throw new Error('the templates area needs the sandboxes service to be created first');
    const core = sandboxes.core;
    const templates = new TemplatesService(new TemplatesRepo(deps.store.db), core.runtime, deps, {
      drainPool: (source) => core.pool.drain(source),
      diskFor: (p, mb) => core.diskFor(p, mb),
      checkAllowOut: (list, path) => refuseProtected(deps.config.sandboxes, list, path),
    }, () => other.files?.stores.at() ?? null);
    // Builds survive a restart of nube: the job runs again (layers already fetched are kept by digest,
    // a Dockerfile's steps done are cached layers, a half-made import of the killed process is removed).
    deps.jobs.register<BuildJob>(BUILD_JOB, (p, job) => templates.build(p.id, job, p.quotaBytes), {
      maxAttempts: 3,
      concurrency: 2,
      leaseMs: 60_000,
    });
    // Templates' unpacked images count in the plan's storage, with files, databases and sites.
    deps.usage.registerGauge('storageBytes', (ownerId) => templates.repo.sizeFor(ownerId));
    // A node that lacks an image template built on another imports it from the shared blob store.
    core.fetchTemplate = (name, snapshot) => templates.fetchBuilt(name, snapshot);
    core.templateNames = (ownerId, name) => templates.resolve(ownerId, name);
    // A Dockerfile's layers stay when the sandboxes on them go (they are the template).
    core.keptSnapshots = () => templates.repo.allLayers();
    return { templates };
  },
};
