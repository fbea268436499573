import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

// Sandbox records (owner, lifecycle, clocks), derived templates and snapshots. The driver keeps its own
// state for re-adoption; these rows are what the API answers from and what the timers act on.

interface SandboxesTable {
  id: string;
  owner_id: string;
  /** Id handed to the driver (`sbx-...`: the driver allows no underscore); also the hostname inside. */
  runtime_id: string;
  status: string;
  name: string | null;
  template: string;
  template_build: string;
  derived_template_id: string | null;
  template_key: string | null;
  template_hash: string | null;
  parent_id: string | null;
  /** JSON objects as text. */
  metadata: string;
  /** Sealed with the secret box: env may hold credentials. */
  env_sealed: string;
  timeout_seconds: number;
  suspend_on_idle: number;
  idle_ttl_seconds: number | null;
  hard_ttl_seconds: number | null;
  /** Epoch ms; null while suspended (the TTL is paused, `remaining_ms` holds what was left). */
  expires_at: number | null;
  remaining_ms: number | null;
  hard_expires_at: number | null;
  bootstrap: string | null;
  exposed_ports: string;
  network_policy: string;
  kernel_exec_id: string | null;
  /** Why a `failed` sandbox could not start. */
  error: string | null;
  cpus: number;
  memory_mb: number;
  /** Disk limit in MiB: asked for while starting, the enforced one once started (null: none enforced). */
  disk_mb: number | null;
  events: string;
  started_at: number;
  suspended_at: number | null;
  /** 1: its suspends keep processes and memory unless told otherwise (`suspendKeepsMemory`). */
  suspend_keeps_memory: number;
  /** 1: suspended with its processes frozen in memory (a resume thaws them). */
  memory_kept: number;
  created_at: number;
  /** The node holding the sandbox (placement.ts); null on rows made before nodes existed. */
  node_id: string | null;
  /** The scoped key (with caps) that created it: its CPU time counts toward that key (cpu-meter.ts). */
  key_id: string | null;
  /** CPU time of its current cgroup already added to that key's counter, microseconds. */
  cpu_counted_usec: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

interface SandboxTemplatesTable {
  id: string;
  owner_id: string;
  key: string;
  hash: string;
  name: string | null;
  snapshot_id: string;
  base_template: string;
  base_build: string;
  base_built_at: string;
  source_sandbox_id: string | null;
  size_bytes: number;
  bootstrap: string | null;
  /** The node holding the snapshot (where sandboxes from it start); null on rows from before nodes. */
  node_id: string | null;
  created_at: number;
}

interface SandboxSnapshotsTable {
  id: string;
  owner_id: string;
  sandbox_id: string;
  /** `user` (snapshot action) or `fork` (taken by fork; freed when nothing stands on it). */
  kind: string;
  name: string | null;
  size_bytes: number;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    sandboxes: SandboxesTable;
    sandbox_templates: SandboxTemplatesTable;
    sandbox_snapshots: SandboxSnapshotsTable;
  }
}

export const sandboxesMigrations: Record<string, Migration> = {
  '0100-sandboxes-records': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('sandboxes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('runtime_id', 'text', (c) => c.notNull().unique())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('template', 'text', (c) => c.notNull())
        .addColumn('template_build', 'text', (c) => c.notNull())
        .addColumn('derived_template_id', 'text')
        .addColumn('template_key', 'text')
        .addColumn('template_hash', 'text')
        .addColumn('parent_id', 'text')
        .addColumn('metadata', 'text', (c) => c.notNull())
        .addColumn('env_sealed', 'text', (c) => c.notNull())
        .addColumn('timeout_seconds', 'integer', (c) => c.notNull())
        .addColumn('suspend_on_idle', 'integer', (c) => c.notNull())
        .addColumn('idle_ttl_seconds', 'integer')
        .addColumn('hard_ttl_seconds', 'integer')
        .addColumn('expires_at', 'bigint')
        .addColumn('remaining_ms', 'bigint')
        .addColumn('hard_expires_at', 'bigint')
        .addColumn('bootstrap', 'text')
        .addColumn('exposed_ports', 'text', (c) => c.notNull())
        .addColumn('network_policy', 'text', (c) => c.notNull())
        .addColumn('kernel_exec_id', 'text')
        .addColumn('cpus', 'integer', (c) => c.notNull())
        .addColumn('memory_mb', 'integer', (c) => c.notNull())
        .addColumn('events', 'text', (c) => c.notNull())
        .addColumn('started_at', 'bigint', (c) => c.notNull())
        .addColumn('suspended_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('sandboxes_owner').on('sandboxes').column('owner_id').execute();
      await db.schema.createIndex('sandboxes_derived').on('sandboxes').column('derived_template_id').execute();
      await db.schema
        .createTable('sandbox_templates')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('key', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('snapshot_id', 'text', (c) => c.notNull())
        .addColumn('base_template', 'text', (c) => c.notNull())
        .addColumn('base_build', 'text', (c) => c.notNull())
        .addColumn('base_built_at', 'text', (c) => c.notNull())
        .addColumn('source_sandbox_id', 'text')
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('bootstrap', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('sandbox_templates_key')
        .on('sandbox_templates')
        .columns(['owner_id', 'key', 'hash'])
        .unique()
        .execute();
      await db.schema
        .createTable('sandbox_snapshots')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('sandbox_snapshots_sandbox').on('sandbox_snapshots').column('sandbox_id').execute();
    },
  },
  '0101-sandboxes-failed': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('error', 'text').execute();
    },
  },
  // Machines' tiers give boxes a fraction of a core (0.25, 0.5). SQLite keeps 0.5 in an integer
  // column as it is; PostgreSQL needs the column's type changed (SQLite has no ALTER COLUMN TYPE).
  '0102-sandboxes-fractional-cpus': {
    async up(db: Kysely<unknown>) {
      const pg = await sql`select version() as v`.execute(db).then(
        () => true,
        () => false,
      );
      if (pg) await sql`alter table sandboxes alter column cpus type double precision`.execute(db);
    },
  },
  '0103-sandboxes-disk': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('disk_mb', 'integer').execute();
    },
  },
  '0104-sandboxes-memory-kept': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('suspend_keeps_memory', 'integer', (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable('sandboxes').addColumn('memory_kept', 'integer', (c) => c.notNull().defaultTo(0)).execute();
    },
  },
  '0262-sandboxes-key-cpu': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('key_id', 'text').execute();
      await db.schema.alterTable('sandboxes').addColumn('cpu_counted_usec', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.createIndex('sandboxes_key').on('sandboxes').column('key_id').execute();
    },
  },
};

export type SandboxRow = SandboxesTable;
export type TemplateRow = SandboxTemplatesTable;
export type SnapshotRow = SandboxSnapshotsTable;

/** bigint columns come back as strings from PostgreSQL: numbers everywhere above this line. */
function num<T extends Record<string, unknown>>(row: T, cols: (keyof T)[]): T {
  for (const c of cols) if (row[c] !== null && row[c] !== undefined) (row as Record<keyof T, unknown>)[c] = Number(row[c]);
  return row;
}
const SBX_NUM: (keyof SandboxRow)[] = [
  'timeout_seconds', 'suspend_on_idle', 'idle_ttl_seconds', 'hard_ttl_seconds', 'expires_at', 'remaining_ms',
  'hard_expires_at', 'cpus', 'memory_mb', 'started_at', 'suspended_at', 'created_at', 'suspend_keeps_memory', 'memory_kept',
  'cpu_counted_usec',
];

export class SandboxesRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async insert(row: SandboxRow): Promise<void> {
    await this.db.insertInto('sandboxes').values(row).execute();
  }
  async get(id: string): Promise<SandboxRow | undefined> {
    const r = await this.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
    return r ? num(r, SBX_NUM) : undefined;
  }
  async byRuntimeId(runtimeId: string): Promise<SandboxRow | undefined> {
    const r = await this.db.selectFrom('sandboxes').selectAll().where('runtime_id', '=', runtimeId).executeTakeFirst();
    return r ? num(r, SBX_NUM) : undefined;
  }
  async list(ownerId: string, workspaces?: readonly string[]): Promise<SandboxRow[]> {
    let q = this.db.selectFrom('sandboxes').selectAll().where('owner_id', '=', ownerId);
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    const rows = await q.orderBy('id').execute();
    return rows.map((r) => num(r, SBX_NUM));
  }
  async allOnNode(nodeId: string): Promise<SandboxRow[]> {
    return (await this.db.selectFrom('sandboxes').selectAll().where('node_id', '=', nodeId).execute()).map((r) => num(r, SBX_NUM));
  }
  /** Running sandboxes on this node that a scoped key created (that key's only, given one). */
  async keyedRunning(nodeId: string, keyId?: string): Promise<SandboxRow[]> {
    let q = this.db
      .selectFrom('sandboxes')
      .selectAll()
      .where('status', '=', 'running')
      .where((w) => w.or([w('node_id', '=', nodeId), w('node_id', 'is', null)]));
    q = keyId ? q.where('key_id', '=', keyId) : q.where('key_id', 'is not', null);
    return (await q.execute()).map((r) => num(r, SBX_NUM));
  }
  /** Moves a sandbox's counted CPU from `from` to `to`; false when someone else moved it first. */
  async moveCpuCounted(id: string, from: number, to: number): Promise<boolean> {
    const r = await this.db.updateTable('sandboxes').set({ cpu_counted_usec: to }).where('id', '=', id).where('cpu_counted_usec', '=', from).executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }
  async countOnNode(nodeId: string): Promise<number> {
    const r = await this.db.selectFrom('sandboxes').select((eb) => eb.fn.countAll<number>().as('n')).where('node_id', '=', nodeId).executeTakeFirstOrThrow();
    return Number(r.n);
  }
  /** Sandboxes an owner holds (starting, running or suspended: destroyed ones have no row). */
  async countFor(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('sandboxes')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }
  async count(): Promise<number> {
    const r = await this.db.selectFrom('sandboxes').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    return Number(r.n);
  }
  /** Sandboxes of every owner per status (GET /metrics). */
  async countByStatus(): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom('sandboxes')
      .select((eb) => ['status', eb.fn.countAll<number>().as('n')])
      .groupBy('status')
      .execute();
    return new Map(rows.map((r) => [r.status, Number(r.n)]));
  }
  async update(id: string, patch: Partial<SandboxRow>): Promise<void> {
    await this.db.updateTable('sandboxes').set(patch).where('id', '=', id).execute();
  }
  async delete(id: string): Promise<void> {
    await this.db.deleteFrom('sandboxes').where('id', '=', id).execute();
  }
  /** Live children (starting, running, suspended): a failed one stands on nothing. */
  async childrenOfTemplate(templateId: string): Promise<string[]> {
    const rows = await this.db
      .selectFrom('sandboxes')
      .select('id')
      .where('derived_template_id', '=', templateId)
      .where('status', '!=', 'failed')
      .execute();
    return rows.map((r) => r.id);
  }

  async insertTemplate(row: TemplateRow): Promise<void> {
    await this.db.insertInto('sandbox_templates').values(row).execute();
  }
  async getTemplate(id: string): Promise<TemplateRow | undefined> {
    const r = await this.db.selectFrom('sandbox_templates').selectAll().where('id', '=', id).executeTakeFirst();
    return r ? num(r, ['size_bytes', 'created_at']) : undefined;
  }
  async templateByKey(ownerId: string, key: string, hash: string): Promise<TemplateRow | undefined> {
    const r = await this.db
      .selectFrom('sandbox_templates')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('key', '=', key)
      .where('hash', '=', hash)
      .executeTakeFirst();
    return r ? num(r, ['size_bytes', 'created_at']) : undefined;
  }
  async templateNodeOf(id: string): Promise<string | null | undefined> {
    const r = await this.db.selectFrom('sandbox_templates').select('node_id').where('id', '=', id).executeTakeFirst();
    return r ? r.node_id : undefined;
  }
  async listTemplates(ownerId: string): Promise<TemplateRow[]> {
    const rows = await this.db.selectFrom('sandbox_templates').selectAll().where('owner_id', '=', ownerId).orderBy('id').execute();
    return rows.map((r) => num(r, ['size_bytes', 'created_at']));
  }
  async templateSnapshotIds(): Promise<Set<string>> {
    return new Set((await this.db.selectFrom('sandbox_templates').select('snapshot_id').execute()).map((r) => r.snapshot_id));
  }
  async deleteTemplate(id: string): Promise<void> {
    await this.db.deleteFrom('sandbox_templates').where('id', '=', id).execute();
  }

  async insertSnapshot(row: SnapshotRow): Promise<void> {
    await this.db.insertInto('sandbox_snapshots').values(row).execute();
  }
  async snapshotsOf(sandboxId: string): Promise<SnapshotRow[]> {
    const rows = await this.db.selectFrom('sandbox_snapshots').selectAll().where('sandbox_id', '=', sandboxId).execute();
    return rows.map((r) => num(r, ['size_bytes', 'created_at']));
  }
  async getSnapshot(id: string): Promise<SnapshotRow | undefined> {
    const r = await this.db.selectFrom('sandbox_snapshots').selectAll().where('id', '=', id).executeTakeFirst();
    return r ? num(r, ['size_bytes', 'created_at']) : undefined;
  }
  async deleteSnapshot(id: string): Promise<void> {
    await this.db.deleteFrom('sandbox_snapshots').where('id', '=', id).execute();
  }
}

export const sandboxWorkspaceMigrations: Record<string, Migration> = {
  '0271-sandboxes-workspace': workspaceColumnMigration('sandboxes', 'owner_id'),
};
