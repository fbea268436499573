import { pathLocator, registerNodeJob } from '../../platform/node-held.js';
import type { AreaModule } from '../area.js';
import { BACKUP_JOB } from './backups.js';
import { MachinesService } from './facade.js';
import { LAUNCH_JOB } from './launch.js';
import { machinesOperations } from './operations.js';
import { installCheckoutRoutes } from './checkout-page.js';
import { MachinesRepo, machineWorkspaceMigrations, machinesMigrations } from './repo.js';
import { MachinesCore } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

export const machinesArea: AreaModule = {
  name: 'machines',
  operations: machinesOperations,
  migrations: { ...machinesMigrations, ...machineWorkspaceMigrations },
  create(deps, other) {
    const { sandboxes, account, files, domains } = other;
    if (!sandboxes || !account || !files || !domains) throw new Error('machines need the sandboxes, account, files and domains services');
    const core = new MachinesCore(
      new MachinesRepo(deps.store.db),
      deps,
      { sandboxes, account, domains },
      deps.payments.provider,
    );
    // A machine order paid at the provider (Stripe's webhook) is settled here.
    deps.payments.receive((pay) => core.providerPaid(pay));
    // Backups go to the blob store the files area configured (its default location).
    const machines = new MachinesService(core, () => files.stores.at());
    // Backups and launches work in the box: they run on the machine's node (node-local job types).
    registerNodeJob<{ machineId: string }>(deps.jobs, deps.nodes, BACKUP_JOB, (j, ctx) => machines.backups.run(j, ctx), {
      maxAttempts: 3,
      concurrency: 1,
      leaseMs: 60_000,
    });
    registerNodeJob<{ machineId: string; commit: string | null }>(deps.jobs, deps.nodes, LAUNCH_JOB, (j, ctx) => machines.launcher.run(j, ctx), {
      maxAttempts: 2,
      concurrency: 2,
      leaseMs: 60_000,
    });
    // A machine's verified domain reaches its app's port (looked up per request: the port can change).
    domains.claims.boxTargets.set('machine', async (id) => {
      const r = await core.repo.get(id);
      return r && r.status !== 'deleted' && r.port !== null ? { sandboxId: r.sandbox_id, port: r.port } : null;
    });
    // The port proxy's 502 page says what the machine's app is doing (crashing, out of memory, starting).
    sandboxes.portExplainers.push(async (sandboxId, port) => {
      const r = await core.repo.bySandbox(sandboxId);
      if (!r || r.port !== port) return null;
      if (r.status === 'building') return { status: 'building', message: `machine ${r.name} is being launched (${r.phase ?? 'queued'})` };
      const h = await core.appHealth(await core.principalOf(r.owner_id), r);
      if (!h || h.status === 'running' || !h.message) return null;
      return { status: h.status, message: `machine ${r.name}: ${h.message}` };
    });
    deps.usage.registerGauge('boxes', (ownerId) => core.repo.count(ownerId));
    deps.workspaces.register(
      tableHolder({
        area: 'machines',
        param: 'id',
        deleteOperation: 'machines.delete',
        db: deps.store.db,
        table: 'machines',
        remove: (p, id) => machines.delete(p, id),
        only: ['status', '!=', 'deleted'],
      }),
    );
    // In the background: a box's supervisor may take a moment; the server need not wait for it.
    void machines.adopt(deps).catch((e: unknown) => deps.log.error({ err: e }, 'machines re-adoption failed'));
    return { machines };
  },
  routes(app, services, deps) {
    // Every request for a machine is served by the node holding its box.
    deps.forwarder.addLocator(pathLocator('machine', /^\/api\/v2\/machines\/(mch_[A-Za-z0-9]+)/, (id) => services.machines.core.repo.nodeOf(id)));
    installCheckoutRoutes(app, () => services.machines.core);
  },
};
