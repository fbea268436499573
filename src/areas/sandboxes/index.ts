import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../../platform/config-shape.js';
import type { AreaModule } from '../area.js';
import type { PlatformDeps } from '../deps.js';
import { TTL_JOB } from './clocks.js';
import { sandboxChecks } from './doctor.js';
import { SandboxesService } from './facade.js';
import { registerSandboxMetrics, registerStoreMetrics } from './metrics.js';
import { sandboxesOperations } from './operations.js';
import { rawPortsMigrations } from './networking/raw-ports-repo.js';
import { sshMigrations } from './networking/ssh-repo.js';
import { sandboxNodeMigrations } from './placement.js';
import { installHelperTunnel } from './networking/ssh-tunnel.js';
import { PortProxy } from './proxy.js';
import { SandboxesRepo, sandboxWorkspaceMigrations, sandboxesMigrations } from './repo.js';
import type { SandboxRuntime } from './runtime/driver.js';
import { GvisorRuntime } from './runtime/gvisor/runtime.js';
import { NamespacesRuntime } from './runtime/namespaces/runtime.js';
import { storePaths } from './runtime/namespaces/store.js';
import { putStoreBackup, type StoreBackupOptions, takeStoreBackup } from './runtime/namespaces/backup.js';
import { registerHostUser } from './runtime/namespaces/host-users.js';
import { buildLogger } from './build-log.js';
import { runtimeDataDir } from './runtime-dir.js';
import { PROVISION_JOB } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

/** The configured sandbox runtime (also used by the CLI's `templates build`). */
export function makeRuntime(config: Config): { runtime: SandboxRuntime; dataDir: string } {
  const c = config.sandboxes;
  // Each driver keeps its own state (a sandbox belongs to the driver that started it); templates are shared.
  const dataDir = runtimeDataDir(config);
  const opts = {
    dataDir,
    templatesDir: c.templatesDir,
    bridge: c.bridge,
    privateAllow: c.privateAllow,
    cgroupParent: c.cgroupParent,
    cgroupVersion: c.cgroups,
    favorDynmods: c.favorDynmods,
    mirror: c.mirror,
    store: c.store,
    storeSizeBytes: c.storeSizeBytes,
    storeReserveBytes: c.storeReserveBytes,
  };
  const runtime = c.driver === 'gvisor' ? new GvisorRuntime(opts) : new NamespacesRuntime(opts);
  return { runtime, dataDir };
}

/**
 * After a restart of nube: the driver re-adopts live sandboxes (or restarts dead ones on their files),
 * then records and driver agree: a driver sandbox without a record is destroyed, a record whose
 * sandbox is gone is removed, and a record takes the driver's state. Skipped while nube has never run a
 * sandbox, so servers that do not use sandboxes never touch the host's network or cgroups.
 */
async function reconcile(svc: SandboxesService, runtimeDir: string, deps: PlatformDeps): Promise<void> {
  const { repo, runtime, placement } = svc.core;
  // Its sandboxes are in the data dir, or in the store image (mounted again by recover after a reboot).
  const hasRuntime = existsSync(join(runtimeDir, 'sandboxes')) || existsSync(storePaths(runtimeDir).image);
  // Records from before nodes existed are this data directory's when it holds sandboxes.
  if (hasRuntime) await placement.claimUnplaced();
  if (!hasRuntime && (await repo.countOnNode(placement.here)) === 0) return;
  const infos = await runtime.recover();
  const seen = new Set<string>();
  for (const info of infos) {
    const row = await repo.byRuntimeId(info.id);
    if (!row) {
      deps.log.warn({ sandbox: info.id }, 'sandbox without a record: destroyed');
      await runtime.destroy(info.id).catch((e: unknown) => deps.log.error({ err: e }, 'destroy failed'));
      continue;
    }
    seen.add(row.id);
    if (row.status !== 'starting' && row.status !== info.state) await repo.update(row.id, { status: info.state });
  }
  for (const row of await repo.allOnNode(placement.here)) {
    // A starting record's job is still to run; a failed one has no sandbox and stays until it expires.
    if (row.status !== 'starting' && row.status !== 'failed' && !seen.has(row.id)) {
      deps.log.warn({ sandbox: row.id }, 'record without a sandbox: removed');
      await repo.delete(row.id);
      await deps.jobs.cancel({ key: `sandbox-ttl:${row.id}` });
    }
  }
}

export const sandboxesArea: AreaModule = {
  name: 'sandboxes',
  operations: sandboxesOperations,
  migrations: { ...sandboxesMigrations, ...sandboxWorkspaceMigrations, ...sandboxNodeMigrations, ...rawPortsMigrations, ...sshMigrations },
  async create(deps, other) {
    if (!other.domains) throw new Error('sandboxes need the domains service (custom domains) to be created first');
    const { runtime, dataDir } = makeRuntime(deps.config);
    // `nube cleanup` refuses while this process runs on the data dir, and keeps the bridge, nft table
    // and cgroup parent it shares with other nubes on the host (host-users.ts).
    const c = deps.config.sandboxes;
    const unregister = registerHostUser({ dataDir, bridge: c.bridge.name, cgroupParent: c.cgroupParent });
    const sandboxes = new SandboxesService(new SandboxesRepo(deps.store.db), runtime, deps, other.domains.claims);
    unregisterOnClose.set(sandboxes, unregister);
    // A sandbox's clocks and provisioning run on its node (node-local job types); the plain types are
    // those queued before nodes existed.
    for (const type of [TTL_JOB, deps.nodes.jobType(TTL_JOB, null)]) {
      deps.jobs.register<{ id: string }>(type, (p) => sandboxes.core.clocks.fire(p.id), { maxAttempts: 10 });
    }
    for (const type of [PROVISION_JOB, deps.nodes.jobType(PROVISION_JOB, null)]) {
      deps.jobs.register<{ id: string }>(type, (p, job) => sandboxes.core.provision(p.id, job), { maxAttempts: 2, concurrency: 2 });
    }
    sandboxes.core.placement.reportTo(runtime);
    deps.usage.registerGauge('sandboxes', (ownerId) => sandboxes.core.repo.countFor(ownerId));
    registerSandboxMetrics(deps.metrics, sandboxes.core.repo, sandboxes.core.pool);
    registerStoreMetrics(deps.metrics, deps.config);
    await reconcile(sandboxes, dataDir, deps);
    sandboxes.core.cpu.start();
    await sandboxes.rawPorts.restore();
    await sandboxes.ssh.restore();
    // Built-in templates take minutes to build: in the background, so the server starts at once; a
    // create meanwhile answers `starting` and its job waits for the same build (a lock shared on disk).
    for (const name of deps.config.sandboxes.prebuild) {
      runtime.ensureTemplate(name, buildLogger(deps.log, { template: name })).then(
        (t) => {
          deps.log.info({ template: name, build: t.build }, 'template ready');
          sandboxes.core.pool.warm({ template: name });
        },
        (e: unknown) => deps.log.error({ err: e, template: name }, 'template build failed'),
      );
    }
    deps.workspaces.register(
      tableHolder({ area: 'sandboxes', param: 'id', deleteOperation: 'sandboxes.delete', db: deps.store.db, table: 'sandboxes', remove: (p, id) => sandboxes.delete(p, id) }),
    );
    return { sandboxes };
  },
  // The sandbox store (sandboxes' files, snapshots, volumes): copied by the runtime itself, each
  // running sandbox frozen for the instant of a reflink copy (runtime/namespaces/backup.ts).
  backup: (config) => {
    const c = config.sandboxes;
    if (c.driver === 'gvisor') {
      // Not copied yet (its store is runsc's); said at every backup rather than left out in silence.
      const says = (line: (s: string) => void) =>
        line("the gVisor driver's sandboxes are not in this backup: after a restore their records stay and their files do not (use snapshots or volume backups for what must survive)");
      return [{ name: 'sandbox-store', dir: runtimeDataDir(config), own: { take: async (_into, progress) => says(progress), put: async () => {} } }];
    }
    const o: StoreBackupOptions = {
      dataDir: runtimeDataDir(config),
      templatesDir: c.templatesDir,
      cgroupParent: c.cgroupParent,
      cgroupVersion: c.cgroups,
      mode: c.store,
      sizeBytes: c.storeSizeBytes,
      reserveBytes: c.storeReserveBytes,
    };
    return [
      {
        name: 'sandbox-store',
        dir: o.dataDir,
        own: {
          take: (into, progress) => takeStoreBackup(o, into, progress),
          put: (from, progress) => {
            const { runtime } = makeRuntime(config);
            return putStoreBackup(o, from, async (volume, bytes) => {
              if (!runtime.volumes) throw new Error(`the ${c.driver} runtime keeps no volumes: restore volume ${volume} with the namespaces driver`);
              await runtime.volumes.create(volume, bytes);
            }, progress);
          },
        },
      },
    ];
  },
  doctor: (config) => sandboxChecks(config, () => makeRuntime(config).runtime),
  routes(app, services, deps) {
    const proxy = new PortProxy(services.sandboxes.core, services.sandboxes.domains, services.sandboxes.portExplainers);
    const sandboxOf = (host: string | undefined) => {
      const m = proxy.match(host);
      return m && 'id' in m ? { id: m.id } : null;
    };
    const core = services.sandboxes.core;
    for (const l of core.placement.locators(sandboxOf, (id) => core.repo.templateNodeOf(id))) deps.forwarder.addLocator(l);
    // A machine's domain is looked up asynchronously (its app's port can change): the host is the key,
    // looked up again when located (only with other nodes: a single node forwards nothing).
    deps.forwarder.addLocator({
      what: 'sandbox',
      match: (_path, host) => {
        const m = proxy.match(host);
        if (!m || !('via' in m)) return undefined;
        m.via.catch(() => {});
        return host;
      },
      locate: async (host) => {
        const m = proxy.match(host);
        const t = m && 'via' in m ? await m.via : null;
        return t ? core.placement.nodeOf(t.sandboxId) : undefined;
      },
    });
    // SSH sessions another node's gateway serves reach this node's sandboxes' helpers here.
    installHelperTunnel(app, services.sandboxes.ssh);
    proxy.install(app);
  },
  async close(services) {
    // Pooled sandboxes have no record: they go with this process (a crash leaves them to reconcile).
    await services.sandboxes.core.pool.close();
    await services.sandboxes.core.cpu.stop();
    await services.sandboxes.rawPorts.close();
    await services.sandboxes.ssh.close();
    await services.sandboxes.core.runtime.close();
    unregisterOnClose.get(services.sandboxes)?.();
  },
};

const unregisterOnClose = new WeakMap<SandboxesService, () => void>();
