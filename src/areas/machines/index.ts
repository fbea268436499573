import type { Principal } from '../../platform/auth.js';
import type { AreaModule } from '../area.js';
import type { PlatformDeps } from '../deps.js';
import type { BlobStore } from '../../blob/index.js';
import { MachineApps } from './app.js';
import { BACKUP_JOB, Backups } from './backups.js';
import { LAUNCH_JOB, Launcher } from './launch.js';
import { machinesOperations } from './operations.js';
import { BuiltinCheckout, installCheckoutRoutes } from './payments.js';
import { Releases } from './releases.js';
import { MachinesRepo, machinesMigrations } from './repo.js';
import { MachinesCore } from './service.js';

/** The machines service handlers call: the lifecycle core, the app in the box, its releases. */
export class MachinesService {
  readonly apps: MachineApps;
  readonly releases: Releases;
  readonly launcher: Launcher;
  readonly backups: Backups;
  constructor(
    readonly core: MachinesCore,
    store: () => BlobStore,
  ) {
    this.apps = new MachineApps(core);
    this.releases = new Releases(core, this.apps);
    this.launcher = new Launcher(core, this.apps, this.releases);
    this.backups = new Backups(core, this.apps, store);
    core.onFulfil = (p, o) => this.launcher.fulfil(p, o);
    core.onCreated = (id) => this.backups.arm(id);
  }

  delete(p: Principal, id: string) {
    return this.core.delete(p, id, async (r) => {
      await this.apps.stop(p, r).catch(() => {});
      await this.core.deps.jobs.cancel({ key: `machine-backup:${r.id}` });
      await this.backups.prune(r.id, true);
    });
  }

  /**
   * After a restart of nube: the sandboxes area has re-adopted (or restarted) the boxes; a machine
   * whose supervisor no longer runs (its box was restarted) gets it started again.
   */
  async adopt(deps: PlatformDeps): Promise<void> {
    for (const r of await this.core.repo.live()) {
      await this.backups.arm(r.id);
      if (!r.supervisor_exec_id) continue;
      try {
        const p = await this.core.principalOf(r.owner_id);
        const { processes } = await this.core.s.sandboxes.work.bgList(p, r.sandbox_id);
        if (processes.some((x) => x.execId === r.supervisor_exec_id && x.state === 'running')) continue;
        await this.apps.restart(p, r.id);
        deps.log.info({ machine: r.id }, 'machine supervisor restarted after a restart of nube');
      } catch (e) {
        deps.log.error({ err: e, machine: r.id }, 'machine could not be re-adopted');
        await this.core.repo.update(r.id, { last_error: `not restarted after a restart of nube: ${(e as Error).message}` });
      }
    }
  }
}

export const machinesArea: AreaModule = {
  name: 'machines',
  operations: machinesOperations,
  migrations: machinesMigrations,
  create(deps, other) {
    const { sandboxes, account, files } = other;
    if (!sandboxes || !account || !files) throw new Error('machines need the sandboxes, account and files services');
    const core = new MachinesCore(
      new MachinesRepo(deps.store.db),
      deps,
      { sandboxes, account },
      new BuiltinCheckout(() => deps.publicUrl()),
    );
    // Backups go to the blob store the files area configured (its default location).
    const machines = new MachinesService(core, () => files.stores.at());
    deps.jobs.register<{ machineId: string }>(BACKUP_JOB, (j) => machines.backups.run(j), { maxAttempts: 3, concurrency: 1, leaseMs: 60_000 });
    deps.jobs.register<{ machineId: string; commit: string | null }>(LAUNCH_JOB, (j) => machines.launcher.run(j), {
      maxAttempts: 2,
      concurrency: 2,
      leaseMs: 60_000,
    });
    deps.usage.registerGauge('boxes', (ownerId) => core.repo.count(ownerId));
    // In the background: a box's supervisor may take a moment; the server need not wait for it.
    void machines.adopt(deps).catch((e: unknown) => deps.log.error({ err: e }, 'machines re-adoption failed'));
    return { machines };
  },
  routes(app, services) {
    installCheckoutRoutes(app, () => services.machines.core);
  },
};
