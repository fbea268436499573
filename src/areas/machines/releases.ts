// Releases: each is an immutable copy of the app tree (built, dependencies included) kept in the box
// under /opt/nube/releases/<id>, made read-only. Rollback copies a release back to /app and restarts:
// no install, no build. The first release a launch publishes is the recovery release.
import type { z } from 'zod';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { MachineApps } from './app.js';
import type { Release } from './schemas.js';
import type { MachineRow, ReleaseRow } from './repo.js';
import type { MachinesCore } from './service.js';
import { APP_DIR } from './supervisor.js';

export const RELEASES_DIR = '/opt/nube/releases';

export class Releases {
  constructor(
    private readonly core: MachinesCore,
    private readonly apps: MachineApps,
  ) {}

  view(r: ReleaseRow, m: MachineRow): z.input<typeof Release> {
    return {
      id: r.id,
      machineId: r.machine_id,
      version: r.version,
      message: r.message,
      source: r.source,
      status: r.status,
      current: m.current_release_id === r.id,
      sizeBytes: r.size_bytes,
      createdAt: new Date(r.created_at).toISOString(),
    };
  }

  async list(p: Principal, id: string) {
    const m = await this.core.own(p, id);
    return { releases: (await this.core.repo.releases(m.id)).map((r) => this.view(r, m)) };
  }

  /** Publishes the current app tree as a release (it is what runs, so it becomes current). */
  async publish(p: Principal, id: string, message: string | null, source: ReleaseRow['source'] = 'manual') {
    const m = await this.apps.ready(p, id);
    const rid = newId('rel');
    const dir = `${RELEASES_DIR}/${rid}`;
    const out = await this.core.s.sandboxes.work.exec(p, m.sandbox_id, {
      command: `set -e; test -d ${APP_DIR}; mkdir -p ${RELEASES_DIR}; cp -a ${APP_DIR} ${dir}; chmod -R a-w ${dir}; du -sb ${dir} | cut -f1`,
      timeoutSeconds: 300,
    });
    if (out.exitCode !== 0) {
      throw errors.conflict(`could not publish the app tree: ${(out.stderr || 'no /app').slice(0, 500)}`, 'ReleaseFailed');
    }
    const row: ReleaseRow = {
      id: rid,
      machine_id: m.id,
      owner_id: p.ownerId,
      version: await this.core.repo.nextVersion(m.id),
      message,
      source,
      status: 'ready',
      size_bytes: Number.parseInt(out.stdout.trim(), 10) || 0,
      created_at: Date.now(),
    };
    await this.core.repo.insertRelease(row);
    await this.core.repo.update(m.id, { current_release_id: rid });
    return this.view(row, { ...m, current_release_id: rid });
  }

  /** Puts a release's tree back in /app and restarts: the same machine, nothing rebuilt. */
  async rollback(p: Principal, id: string, releaseId: string) {
    const m = await this.apps.ready(p, id);
    const rel = await this.core.repo.release(m.id, releaseId);
    if (!rel) throw errors.validation([{ path: ['body', 'releaseId'], message: 'no such release of this machine' }]);
    const dir = `${RELEASES_DIR}/${rel.id}`;
    const out = await this.core.s.sandboxes.work.exec(p, m.sandbox_id, {
      command: `set -e; rm -rf ${APP_DIR}.next ${APP_DIR}.prev; cp -a ${dir} ${APP_DIR}.next; chmod -R u+w ${APP_DIR}.next; if [ -e ${APP_DIR} ]; then mv ${APP_DIR} ${APP_DIR}.prev; fi; mv ${APP_DIR}.next ${APP_DIR}; rm -rf ${APP_DIR}.prev`,
      timeoutSeconds: 300,
    });
    if (out.exitCode !== 0) throw errors.conflict(`could not switch to the release: ${out.stderr.slice(0, 500)}`, 'RollbackFailed');
    await this.core.repo.update(m.id, { current_release_id: rel.id });
    await this.apps.restart(p, id);
    return { ok: true as const, machineId: m.id, releaseId: rel.id, previousReleaseId: m.current_release_id };
  }
}
