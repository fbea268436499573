import type { Kysely, Migration } from 'kysely';
import type { Principal } from './auth.js';
import { errors } from './errors.js';
import { opArea } from './scopes.js';

/**
 * Workspaces as the other areas see them. Every resource row carries `workspace_id` (`'default'` for
 * rows made before workspaces and for callers that never name one); the workspaces area owns the
 * workspaces themselves and answers `exists`. Areas register as holders: how many resources a
 * workspace holds, how to delete them through their own service, and (for the gate) which workspace
 * a resource a path parameter names belongs to. Platform code: it imports no area.
 */
export const DEFAULT_WORKSPACE = 'default';

export interface WorkspaceHolder {
  /** The area (an operation id's first segment) and resource kind, e.g. `sandboxes`. */
  area: string;
  /** The path parameter naming one of its resources (`id`, `dbId`), for the gate. */
  param?: string;
  /** The workspace of a resource (undefined when the owner has no such resource). */
  workspaceOf?(ownerId: string, id: string): Promise<string | undefined>;
  /** Resources of the owner per workspace. */
  counts(ownerId: string): Promise<Map<string, number>>;
  /** Stored bytes per workspace, where the area knows them cheaply. */
  storageBytes?(ownerId: string): Promise<Map<string, number>>;
  /** The operation a forced workspace delete stands in for (a scoped caller must hold it). */
  deleteOperation?: string;
  /** Deletes every resource of the workspace as its own DELETE would; returns how many. */
  removeAll(p: Principal, workspaceId: string): Promise<number>;
}

/** What a workspace-scoped key carries (KeyScope.workspaceIds). */
type Scoped = Pick<Principal, 'scope' | 'ownerId'>;

export class WorkspaceRegistry {
  private readonly holders: WorkspaceHolder[] = [];
  private readonly byArea = new Map<string, WorkspaceHolder>();
  /** Set by the workspaces area: whether the owner has a workspace with this id (not the default). */
  exists: (ownerId: string, id: string) => Promise<boolean> = async () => false;

  register(h: WorkspaceHolder): void {
    this.holders.push(h);
    if (h.param && h.workspaceOf) this.byArea.set(h.area, h);
  }

  list(): readonly WorkspaceHolder[] {
    return this.holders;
  }

  /** 404 unless the caller may reach workspace `id` (its account has it, and its key names it). */
  async reach(p: Scoped, id: string): Promise<void> {
    const ws = p.scope?.workspaceIds;
    if (ws && !ws.has(id)) throw errors.notFound(`workspace ${id}`);
    if (id !== DEFAULT_WORKSPACE && !(await this.exists(p.ownerId, id))) throw errors.notFound(`workspace ${id}`);
  }

  /**
   * The workspace a new resource lands in: the one asked for (404 when unknown or out of the key's
   * reach), else the key's only workspace, else the default. A key reaching several must name one.
   */
  async forCreate(p: Scoped, asked: string | undefined, path: (string | number)[] = ['body', 'workspaceId']): Promise<string> {
    if (asked !== undefined) {
      await this.reach(p, asked);
      return asked;
    }
    const ws = p.scope?.workspaceIds;
    if (!ws) return DEFAULT_WORKSPACE;
    if (ws.size === 1) return [...ws][0]!;
    throw errors.validation([{ path, message: `this key reaches workspaces ${[...ws].join(', ')}: name one in workspaceId` }]);
  }

  /** The workspaces a list shows: the one asked for, else the key's, else all (undefined). */
  async filter(p: Scoped, asked: string | undefined): Promise<readonly string[] | undefined> {
    if (asked !== undefined) {
      await this.reach(p, asked);
      return [asked];
    }
    const ws = p.scope?.workspaceIds;
    return ws ? [...ws] : undefined;
  }

  /** Whether a workspace-scoped caller may see a resource of workspace `id` (others are 404). */
  sees(p: Scoped, id: string): boolean {
    const ws = p.scope?.workspaceIds;
    return !ws || ws.has(id);
  }

  /**
   * The gate before an operation's handler (platform/rest.ts, websocket.ts): a workspace-scoped key
   * addressing a resource (by its area's path parameter) of a workspace it does not reach gets 404,
   * as for another account's. Resolves undefined at once for every other caller.
   */
  gate(p: Principal, op: { id: string }, params: Record<string, unknown> | undefined): Promise<void> | undefined {
    const ws = p.scope?.workspaceIds;
    if (!ws) return undefined;
    const h = this.byArea.get(opArea(op));
    const id = h?.param ? params?.[h.param] : undefined;
    if (!h || typeof id !== 'string') return undefined;
    return h.workspaceOf!(p.ownerId, id).then((w) => {
      if (w !== undefined && !ws.has(w)) throw errors.notFound(h.area.replace(/s$/, ''));
    });
  }
}

/**
 * The column every workspace-held table gets (each area's own migration calls this on its own table):
 * NOT NULL with the default `'default'`, so existing rows are backfilled by the ALTER itself and an
 * insert that names no workspace lands in the default one (docs/decisions.md).
 */
export function workspaceColumnMigration(table: string, ownerColumn: string): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable(table)
        .addColumn('workspace_id', 'text', (c) => c.notNull().defaultTo(DEFAULT_WORKSPACE))
        .execute();
      await db.schema.createIndex(`${table}_workspace`).on(table).columns([ownerColumn, 'workspace_id']).execute();
    },
  };
}

// The same two questions of every workspace-held table, asked by its own area's repo.
// biome-ignore lint/suspicious/noExplicitAny: the table is the caller's own, named at run time
type AnyDb = Kysely<any>;

/** A condition on the rows that count (`['status', '!=', 'deleted']`). */
export type RowFilter = readonly [column: string, op: '=' | '!=', value: string];

/** Rows of an owner per workspace in `table`. */
export async function countByWorkspace(db: AnyDb, table: string, ownerColumn: string, ownerId: string, only?: RowFilter): Promise<Map<string, number>> {
  let q = db
    .selectFrom(table)
    .select((eb) => ['workspace_id', eb.fn.countAll<number>().as('n')])
    .where(ownerColumn, '=', ownerId);
  if (only) q = q.where(only[0], only[1], only[2]);
  const rows = await q.groupBy('workspace_id').execute();
  return new Map(rows.map((r) => [String(r.workspace_id), Number(r.n)]));
}

/** The workspace of an owner's row `id` in `table`, or undefined. */
export async function workspaceOfRow(db: AnyDb, table: string, ownerColumn: string, ownerId: string, id: string, idColumn = 'id'): Promise<string | undefined> {
  const r = await db.selectFrom(table).select('workspace_id').where(idColumn, '=', id).where(ownerColumn, '=', ownerId).executeTakeFirst();
  return r ? String(r.workspace_id) : undefined;
}

/** Ids of an owner's rows in one workspace (a forced workspace delete removes them one by one). */
export async function idsInWorkspace(db: AnyDb, table: string, ownerColumn: string, ownerId: string, workspaceId: string, only?: RowFilter, idColumn = 'id'): Promise<string[]> {
  let q = db.selectFrom(table).select(idColumn).where(ownerColumn, '=', ownerId).where('workspace_id', '=', workspaceId);
  if (only) q = q.where(only[0], only[1], only[2]);
  const rows = await q.execute();
  return rows.map((r) => String(r[idColumn]));
}

/**
 * A holder whose resources are an area's rows in its own table (`owner_id`, `id`, `workspace_id`),
 * deleted one by one through `remove` (the area's own delete). `only` says which rows count where not
 * all do (live machines, files not in the trash).
 */
export function tableHolder(o: {
  area: string;
  param: string;
  deleteOperation: string;
  db: AnyDb;
  table: string;
  remove: (p: Principal, id: string) => Promise<unknown>;
  only?: RowFilter;
  /** The table's id column when it is not `id` (domains are named by `domain`). */
  idColumn?: string;
  storageBytes?: (ownerId: string) => Promise<Map<string, number>>;
}): WorkspaceHolder {
  const ids = (ownerId: string, ws: string) => idsInWorkspace(o.db, o.table, 'owner_id', ownerId, ws, o.only, o.idColumn);
  return {
    area: o.area,
    param: o.param,
    deleteOperation: o.deleteOperation,
    workspaceOf: (ownerId, id) => workspaceOfRow(o.db, o.table, 'owner_id', ownerId, id, o.idColumn),
    counts: (ownerId) => countByWorkspace(o.db, o.table, 'owner_id', ownerId, o.only),
    ...(o.storageBytes ? { storageBytes: o.storageBytes } : {}),
    removeAll: async (p, ws) => {
      const found = await ids(p.ownerId, ws);
      for (const id of found) await o.remove(p, id);
      return found.length;
    },
  };
}
