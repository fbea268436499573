// The machines service handlers call, over its parts: the lifecycle core, the app in the box, its
// releases, launches and backups.
import type { BlobStore } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import type { PlatformDeps } from '../deps.js';
import { MachineApps } from './app.js';
import { Backups } from './backups.js';
import { Launcher } from './launch.js';
import { Releases } from './releases.js';
import type { MachinesCore } from './service.js';

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
      // Its domains stay the owner's (verified), attached to nothing.
      await this.core.s.domains.claims.detachTarget('machine', r.id);
    });
  }

  /**
   * After a restart of nube: the sandboxes area has re-adopted (or restarted) the boxes; a machine
   * whose supervisor no longer runs (its box was restarted) gets it started again. Only this node's
   * machines: the others' boxes are their nodes'.
   */
  async adopt(deps: PlatformDeps): Promise<void> {
    // Machines from before nodes are recorded on their box's node once the sandbox's is known.
    for (const r of await this.core.repo.unplaced()) {
      const nodeId = await this.core.s.sandboxes.nodeOf(r.sandbox_id);
      if (nodeId) await this.core.repo.update(r.id, { node_id: nodeId });
    }
    for (const r of await this.core.repo.live(deps.nodes.id)) {
      await this.backups.arm(r.id);
      if (!r.supervisor_exec_id) continue;
      try {
        const p = await this.core.principalOf(r.owner_id);
        const { processes } = await this.core.s.sandboxes.work.bgList(p, r.sandbox_id);
        if (processes.some((x) => x.execId === r.supervisor_exec_id && x.state === 'running')) continue;
        // Not waited for: the box's app comes up in the background while nube starts.
        await this.apps.start(p, r.id);
        deps.log.info({ machine: r.id }, 'machine supervisor restarted after a restart of nube');
      } catch (e) {
        deps.log.error({ err: e, machine: r.id }, 'machine could not be re-adopted');
        await this.core.repo.update(r.id, { last_error: `not restarted after a restart of nube: ${(e as Error).message}` });
      }
    }
  }
}
