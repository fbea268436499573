import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { Outbox } from '../../platform/outbox.js';
import { DEFAULT_WORKSPACE, type WorkspaceRegistry } from '../../platform/workspaces.js';
import { isUniqueViolation } from '../../store/unique.js';
import type { WorkspaceRow, WorkspacesRepo } from './repo.js';

export interface WorkspaceView {
  id: string;
  name: string;
  isDefault: boolean;
  createdAt: string;
}

/** Resources of one workspace per kind (areas that hold none are left out). */
export type ResourceCounts = Record<string, number>;

export class WorkspacesService {
  constructor(
    private readonly repo: WorkspacesRepo,
    readonly registry: WorkspaceRegistry,
    private readonly events: Outbox,
    /** When the account was created: the default workspace's createdAt. */
    private readonly accountCreatedAt: (p: Principal) => Promise<string>,
  ) {
    registry.exists = async (ownerId, id) => (await repo.get(ownerId, id)) !== undefined;
  }

  private view(w: WorkspaceRow): WorkspaceView {
    return { id: w.id, name: w.name, isDefault: false, createdAt: new Date(w.createdAt).toISOString() };
  }

  private async defaultView(p: Principal): Promise<WorkspaceView> {
    return { id: DEFAULT_WORKSPACE, name: DEFAULT_WORKSPACE, isDefault: true, createdAt: await this.accountCreatedAt(p) };
  }

  async list(p: Principal): Promise<{ items: WorkspaceView[] }> {
    const items = [await this.defaultView(p), ...(await this.repo.list(p.ownerId)).map((w) => this.view(w))];
    return { items: items.filter((w) => this.registry.sees(p, w.id)) };
  }

  /** The workspace (404 when the account has none by that id or the key does not reach it). */
  async get(p: Principal, id: string): Promise<WorkspaceView & { resources: ResourceCounts }> {
    const w = await this.own(p, id);
    return { ...w, resources: await this.counts(p.ownerId, id) };
  }

  private async own(p: Principal, id: string): Promise<WorkspaceView> {
    if (!this.registry.sees(p, id)) throw errors.notFound(`workspace ${id}`);
    if (id === DEFAULT_WORKSPACE) return this.defaultView(p);
    const w = await this.repo.get(p.ownerId, id);
    if (!w) throw errors.notFound(`workspace ${id}`);
    return this.view(w);
  }

  async create(p: Principal, input: { name: string }): Promise<WorkspaceView> {
    if (p.scope?.workspaceIds) {
      throw errors.forbidden(
        `this key reaches only workspaces ${[...p.scope.workspaceIds].join(', ')}: it cannot create another (a key cannot reach beyond itself)`,
        'KeyScopeTooWide',
      );
    }
    this.checkName(input.name);
    const w: WorkspaceRow = { id: newId('wsp'), accountId: p.ownerId, name: input.name, createdAt: Date.now() };
    try {
      await this.events.atomically(async (trx, emit) => {
        await this.repo.insert(trx, w);
        emit({ event: 'workspace.created', ownerId: p.ownerId, data: { id: w.id, name: w.name, createdAt: new Date(w.createdAt).toISOString() } });
      });
    } catch (e) {
      if (isUniqueViolation(e)) throw this.taken(input.name);
      throw e;
    }
    return this.view(w);
  }

  async update(p: Principal, id: string, input: { name?: string }): Promise<WorkspaceView> {
    const w = await this.own(p, id);
    if (input.name === undefined || input.name === w.name) return w;
    if (w.isDefault) throw errors.conflict('the default workspace cannot be renamed: it is where resources created without a workspaceId land', 'DefaultWorkspace');
    this.checkName(input.name);
    try {
      if (!(await this.repo.rename(p.ownerId, id, input.name))) throw errors.notFound(`workspace ${id}`);
    } catch (e) {
      if (isUniqueViolation(e)) throw this.taken(input.name);
      throw e;
    }
    return { ...w, name: input.name };
  }

  /**
   * Deletes an empty workspace; with `force` its resources first, each through its own area's delete (as
   * that area's DELETE would: their events, clean-up and trash). A scoped caller forces only what its
   * scope may delete.
   */
  async delete(p: Principal, id: string, force: boolean): Promise<{ ok: true; deleted: ResourceCounts }> {
    const w = await this.own(p, id);
    if (w.isDefault) throw errors.conflict('the default workspace cannot be deleted', 'DefaultWorkspace');
    const held = await this.counts(p.ownerId, id);
    const deleted: ResourceCounts = {};
    if (Object.keys(held).length) {
      if (!force) {
        const what = Object.entries(held).map(([k, n]) => `${k}: ${n}`).join(', ');
        throw errors.conflict(`workspace ${id} holds resources (${what}): delete them first, or pass force=true to delete them with it`, 'WorkspaceNotEmpty', { resources: held });
      }
      for (const h of this.registry.list()) {
        if (!held[h.area]) continue;
        if (p.scope && h.deleteOperation && !p.scope.allowed.has(h.deleteOperation)) {
          throw errors.forbidden(`forcing this delete would delete ${h.area}, and this key lacks ${h.deleteOperation}`, 'ScopeMissing', { operation: h.deleteOperation });
        }
      }
      // Areas standing on others (agents and machines on sandboxes) go first: they delete their own boxes.
      for (const h of [...this.registry.list()].reverse()) if (held[h.area]) deleted[h.area] = await h.removeAll(p, id);
      const left = await this.counts(p.ownerId, id);
      if (Object.keys(left).length) throw errors.conflict(`workspace ${id} still holds resources created meanwhile; retry`, 'WorkspaceNotEmpty', { resources: left });
    }
    await this.events.atomically(async (trx, emit) => {
      if (!(await this.repo.delete(trx, p.ownerId, id))) throw errors.notFound(`workspace ${id}`);
      emit({ event: 'workspace.deleted', ownerId: p.ownerId, data: { id, name: w.name } });
    });
    return { ok: true, deleted };
  }

  /** Resources of workspace `id` per kind (kinds with none are left out). */
  async counts(ownerId: string, id: string): Promise<ResourceCounts> {
    const out: ResourceCounts = {};
    for (const h of this.registry.list()) {
      const n = (await h.counts(ownerId)).get(id) ?? 0;
      if (n) out[h.area] = n;
    }
    return out;
  }

  /** Per workspace the caller reaches: its resources per kind, and stored bytes where areas know them. */
  async usage(p: Principal): Promise<{ id: string; name: string; resources: ResourceCounts; storageBytes: number }[]> {
    const { items } = await this.list(p);
    const per = new Map(items.map((w) => [w.id, { id: w.id, name: w.name, resources: {} as ResourceCounts, storageBytes: 0 }]));
    for (const h of this.registry.list()) {
      const [counts, bytes] = await Promise.all([h.counts(p.ownerId), h.storageBytes?.(p.ownerId)]);
      for (const [ws, n] of counts) {
        const u = per.get(ws);
        if (u && n) u.resources[h.area] = n;
      }
      for (const [ws, b] of bytes ?? []) {
        const u = per.get(ws);
        if (u) u.storageBytes += b;
      }
    }
    return [...per.values()];
  }

  private checkName(name: string): void {
    if (name === DEFAULT_WORKSPACE) throw this.taken(name);
  }

  private taken(name: string) {
    return errors.conflict(`this account already has a workspace named ${JSON.stringify(name)}`, 'WorkspaceNameTaken');
  }
}
