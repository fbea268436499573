// Snapshots, copy-on-write forks and derived templates (template-snapshot).
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { SandboxRow, TemplateRow } from './repo.js';
import { newRow } from './rows.js';
import { SandboxRuntimeError } from './runtime/driver.js';
import type { SandboxesCore } from './service.js';
import { rt, toDerivedTemplate } from './views.js';

/** Forks per call: each is a full sandbox on this host. */
export const MAX_FORKS = 10;

export class Forks {
  constructor(private readonly core: SandboxesCore) {}

  async snapshot(p: Principal, id: string, name?: string) {
    const r = await this.core.started(p, id);
    await this.core.clocks.touch(r);
    const snap = await rt(this.core.runtime.snapshot(r.runtime_id));
    const createdAt = Date.now();
    await this.core.repo.insertSnapshot({
      id: snap.id,
      owner_id: p.ownerId,
      sandbox_id: r.id,
      kind: 'user',
      name: name ?? null,
      size_bytes: snap.sizeBytes,
      created_at: createdAt,
    });
    await this.core.event(id, 'snapshot', { snapshotId: snap.id });
    return {
      snapshotId: snap.id,
      sandboxId: r.id,
      name: name ?? null,
      sizeBytes: snap.sizeBytes,
      createdAt: new Date(createdAt).toISOString(),
    };
  }

  async fork(
    p: Principal,
    id: string,
    b: { count?: number; name?: string; metadata?: Record<string, string>; timeoutSeconds?: number },
  ) {
    const count = b.count ?? 1;
    if (count > MAX_FORKS) {
      throw errors.validation([{ path: ['body', 'count'], message: `at most ${MAX_FORKS} forks per call` }]);
    }
    const own = await this.core.own(p, id);
    await this.core.cpu.assertCap(p);
    const parent = await this.core.ensureRunning(own);
    await this.core.clocks.touch(parent);
    const timeoutSeconds = b.timeoutSeconds ?? parent.timeout_seconds;
    this.core.assertSession(p, timeoutSeconds);
    const env = this.core.env(parent);
    const rows: SandboxRow[] = Array.from({ length: count }, () =>
      newRow(
        (e) => this.core.seal(e),
        p,
        {
          template: parent.template,
          timeoutSeconds,
          suspendOnIdle: parent.suspend_on_idle === 1,
          name: b.name ?? parent.name ?? undefined,
          metadata: b.metadata ?? (JSON.parse(parent.metadata) as Record<string, string>),
          env,
        },
        { parent },
      ),
    );
    for (const row of rows) await this.core.repo.insert(row);
    let infos: Awaited<ReturnType<typeof this.core.runtime.fork>>;
    try {
      infos = await rt(this.core.runtime.fork(parent.runtime_id, rows.map((r) => r.runtime_id)));
    } catch (e) {
      for (const row of rows) await this.core.repo.delete(row.id);
      throw e;
    }
    const forkSnap = infos[0]?.layers[0];
    if (forkSnap) {
      const snap = await this.core.runtime.getSnapshot(forkSnap);
      await this.core.repo.insertSnapshot({
        id: forkSnap,
        owner_id: p.ownerId,
        sandbox_id: parent.id,
        kind: 'fork',
        name: null,
        size_bytes: snap?.sizeBytes ?? 0,
        created_at: Date.now(),
      });
    }
    const out = [];
    for (const [i, row] of rows.entries()) {
      // A fork is a wake: the bootstrap (inherited) runs in the child.
      const bootstrap = await this.core.markStarted(row, infos[i]!);
      out.push({ ...this.core.view((await this.core.repo.get(row.id)) ?? row), bootstrap });
    }
    await this.core.event(id, 'forked', { children: rows.map((r) => r.id) });
    return { sandboxes: out };
  }

  private async isStale(t: { base_template: string; base_build: string; base_built_at: string }): Promise<boolean> {
    const current = await this.core.runtime.findTemplate(t.base_template).catch(() => null);
    return !current || current.build !== t.base_build || current.builtAt !== t.base_built_at;
  }

  private async describe(t: TemplateRow) {
    return toDerivedTemplate(t, await this.isStale(t), (await this.core.repo.childrenOfTemplate(t.id)).length);
  }

  /** Idempotent per (key, hash); refused when the sandbox's base template was rebuilt since it started. */
  async templateSnapshot(p: Principal, id: string, b: { key: string; hash: string; name?: string }) {
    const r = await this.core.started(p, id);
    await this.core.clocks.touch(r);
    const current = await this.core.runtime.findTemplate(r.template).catch(() => null);
    const info = await this.core.runtime.get(r.runtime_id);
    if (!info) throw errors.conflict(`sandbox is ${r.status}`, 'InvalidState');
    const stale = (builtAt: string) =>
      errors.conflict(
        `the base template ${r.template} was rebuilt since this ${builtAt}; start from a fresh sandbox`,
        'DerivedTemplateStale',
      );
    if (!current || current.build !== info.templateBuild) throw stale('sandbox started');
    const existing = await this.core.repo.templateByKey(p.ownerId, b.key, b.hash);
    if (existing) {
      if (await this.isStale(existing)) throw stale('derived template was taken');
      return this.describe(existing);
    }
    const snap = await rt(this.core.runtime.snapshot(r.runtime_id));
    const row: TemplateRow = {
      id: newId('tpl'),
      owner_id: p.ownerId,
      key: b.key,
      hash: b.hash,
      name: b.name ?? null,
      snapshot_id: snap.id,
      base_template: r.template,
      base_build: current.build,
      base_built_at: current.builtAt,
      source_sandbox_id: r.id,
      size_bytes: snap.sizeBytes,
      bootstrap: r.bootstrap,
      // Its snapshot is on this node (the sandbox's): sandboxes from it start here.
      node_id: r.node_id ?? this.core.placement.here,
      created_at: Date.now(),
    };
    try {
      await this.core.repo.insertTemplate(row);
    } catch (e) {
      // A concurrent call with the same (key, hash) won: answer with its template, free our snapshot.
      await this.core.runtime.deleteSnapshot(snap.id).catch(() => {});
      const winner = await this.core.repo.templateByKey(p.ownerId, b.key, b.hash);
      if (winner) return this.describe(winner);
      throw e;
    }
    await this.core.event(id, 'template-snapshot', { templateId: row.id, key: b.key, hash: b.hash });
    return this.describe(row);
  }

  async listTemplates(p: Principal, q: { key?: string; hash?: string }) {
    if (q.key !== undefined && q.hash !== undefined) {
      const t = await this.core.repo.templateByKey(p.ownerId, q.key, q.hash);
      if (!t) throw errors.notFound('derived template', 'DerivedTemplateNotProvisioned');
      return this.describe(t);
    }
    const items = [];
    for (const t of await this.core.repo.listTemplates(p.ownerId)) items.push(await this.describe(t));
    return { items };
  }

  private async ownTemplate(p: Principal, id: string): Promise<TemplateRow> {
    const t = await this.core.repo.getTemplate(id);
    if (!t || t.owner_id !== p.ownerId) throw errors.notFound('derived template');
    return t;
  }

  async getTemplate(p: Principal, id: string) {
    return this.describe(await this.ownTemplate(p, id));
  }

  async deleteTemplate(p: Principal, id: string) {
    const t = await this.ownTemplate(p, id);
    const children = await this.core.repo.childrenOfTemplate(t.id);
    const inUse = (ids: string[]) =>
      errors.conflict('derived template has live children', 'DerivedTemplateInUse', { children: ids });
    if (children.length) throw inUse(children);
    // Its warm pool's sandboxes stand on the snapshot: they go first.
    await this.core.pool.drain({ template: t.base_template, snapshot: t.snapshot_id });
    try {
      await this.core.runtime.deleteSnapshot(t.snapshot_id);
    } catch (e) {
      if (e instanceof SandboxRuntimeError && e.code === 'SnapshotInUse') {
        const ids: string[] = [];
        for (const rid of (e.details?.children as string[] | undefined) ?? []) {
          const row = await this.core.repo.byRuntimeId(rid);
          if (row) ids.push(row.id);
        }
        throw inUse(ids);
      }
      if (!(e instanceof SandboxRuntimeError && e.code === 'NotFound')) throw e;
    }
    await this.core.repo.deleteTemplate(t.id);
    return { ok: true };
  }
}
