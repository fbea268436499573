import type { Kysely, Migration, Selectable } from 'kysely';
import type { Tables } from '../../store/schema.js';
import { workspaceColumnMigration } from '../../platform/workspaces.js';

export type MachineStatus = 'provisioning' | 'building' | 'running' | 'stopped' | 'failed' | 'deleted';

interface MachinesTable {
  id: string;
  owner_id: string;
  name: string;
  tier: string;
  cpu_mode: 'shared' | 'reserved';
  disk_addons_gb: number;
  /** The monthly price in centavos (integers on both stores). */
  monthly_centavos: number;
  sandbox_id: string;
  template: string | null;
  /** `deleted` rows are tombstones: a repeated DELETE answers 200, nothing else sees them. */
  status: MachineStatus;
  /** JSON of the last runspec applied (start, port, dataPaths, health): names of secrets, never values. */
  runspec: string | null;
  /** Secret name -> value, as one SecretBox-sealed JSON object; null when none. */
  secrets_sealed: string | null;
  /** 1 when secrets changed with restart=false and wait for /restart. */
  pending_restart: number;
  /** Background process id of the supervisor inside the box. */
  supervisor_exec_id: string | null;
  port: number | null;
  url: string | null;
  current_release_id: string | null;
  last_error: string | null;
  /** The order that paid for it (a box beyond the plan's allowance), or null. */
  order_id: string | null;
  /** JSON of the last launch's source ({kind, url, ref}): what `launch {sandboxId}` redeploys. */
  source: string | null;
  /** JSON of launch options that outlive it: start command, port, non-secret env. */
  overrides: string | null;
  /** While a launch runs: fetching, building, starting, publishing. */
  phase: string | null;
  /** JSON of the last launch's result. */
  last_launch: string | null;
  /** The node holding the machine's box (its sandbox's node); null on rows from before nodes. */
  node_id: string | null;
  /** JSON of the supervisor run nube started last (app-health.ts AppWatch): its token, start, OOM count then. */
  app_watch: string | null;
  created_at: number;
  updated_at: number;
  /** The workspace it belongs to (platform/workspaces.ts); `default` unless created in another. */
  workspace_id: string;
}

interface OrdersTable {
  id: string;
  owner_id: string;
  /** SHA-256 of the token in the checkout URL (the URL is the capability to see the page). */
  token_hash: string;
  kind: 'create' | 'launch';
  /** The request body the order will run once paid. */
  input: string;
  amount_centavos: number;
  description: string;
  status: 'pending' | 'paid';
  machine_id: string | null;
  created_at: number;
  paid_at: number | null;
  /** The payment provider's checkout (a Stripe Checkout Session id) when one is paid there; null: nube's own page. */
  session_id: string | null;
}

interface ReleasesTable {
  id: string;
  machine_id: string;
  owner_id: string;
  version: number;
  message: string | null;
  source: 'launch' | 'manual' | 'recovery';
  status: 'building' | 'ready' | 'failed';
  size_bytes: number;
  created_at: number;
}

interface BackupsTable {
  id: string;
  machine_id: string;
  owner_id: string;
  consistency: 'hot' | 'consistent';
  method: 'sqlite-backup-api' | 'app-paused' | 'app-stopped' | 'hot-copy';
  /** JSON array of the data paths copied. */
  paths: string;
  size_bytes: number;
  status: 'running' | 'completed' | 'failed';
  /** Key of the tar.gz in the blob store. */
  blob_key: string;
  error: string | null;
  created_at: number;
  expires_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    machine_backups: BackupsTable;
    machines: MachinesTable;
    machine_orders: OrdersTable;
    machine_releases: ReleasesTable;
  }
}

export type MachineRow = Selectable<MachinesTable>;
export type OrderRow = Selectable<OrdersTable>;
export type ReleaseRow = Selectable<ReleasesTable>;
export type BackupRow = Selectable<BackupsTable>;

export const machinesMigrations: Record<string, Migration> = {
  '0252-machine-orders-session': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('machine_orders').addColumn('session_id', 'text').execute();
      await db.schema.createIndex('machine_orders_session').on('machine_orders').column('session_id').execute();
    },
  },
  '0124-machines-app-watch': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('machines').addColumn('app_watch', 'text').execute();
    },
  },
  '0122-machines-node': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('machines').addColumn('node_id', 'text').execute();
      await db.schema.createIndex('machines_node').on('machines').column('node_id').execute();
    },
  },
  '0110-machines-tables': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('machines')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('tier', 'text', (c) => c.notNull())
        .addColumn('cpu_mode', 'text', (c) => c.notNull())
        .addColumn('disk_addons_gb', 'integer', (c) => c.notNull())
        .addColumn('monthly_centavos', 'integer', (c) => c.notNull())
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('template', 'text')
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('runspec', 'text')
        .addColumn('secrets_sealed', 'text')
        .addColumn('pending_restart', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('supervisor_exec_id', 'text')
        .addColumn('port', 'integer')
        .addColumn('url', 'text')
        .addColumn('current_release_id', 'text')
        .addColumn('last_error', 'text')
        .addColumn('order_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('machines_owner').on('machines').columns(['owner_id', 'id']).execute();
      await db.schema.createIndex('machines_sandbox').on('machines').columns(['sandbox_id']).execute();
      await db.schema
        .createTable('machine_orders')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('token_hash', 'text', (c) => c.notNull().unique())
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('input', 'text', (c) => c.notNull())
        .addColumn('amount_centavos', 'integer', (c) => c.notNull())
        .addColumn('description', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('machine_id', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('paid_at', 'bigint')
        .execute();
      await db.schema
        .createTable('machine_releases')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('machine_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('version', 'integer', (c) => c.notNull())
        .addColumn('message', 'text')
        .addColumn('source', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('machine_releases_machine').on('machine_releases').columns(['machine_id', 'version']).execute();
    },
  },
  '0111-machines-launch': {
    async up(db: Kysely<unknown>) {
      for (const col of ['source', 'overrides', 'phase', 'last_launch']) {
        await db.schema.alterTable('machines').addColumn(col, 'text').execute();
      }
    },
  },
  '0112-machines-backups': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('machine_backups')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('machine_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('consistency', 'text', (c) => c.notNull())
        .addColumn('method', 'text', (c) => c.notNull())
        .addColumn('paths', 'text', (c) => c.notNull())
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('blob_key', 'text', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('machine_backups_machine').on('machine_backups').columns(['machine_id', 'created_at']).execute();
    },
  },
};

type Db = Kysely<Tables>;

// PostgreSQL answers bigint columns as strings.
const machine = (r: MachineRow): MachineRow => ({ ...r, created_at: Number(r.created_at), updated_at: Number(r.updated_at) });
const order = (r: OrderRow): OrderRow => ({ ...r, created_at: Number(r.created_at), paid_at: r.paid_at === null ? null : Number(r.paid_at) });
const backup = (r: BackupRow): BackupRow => ({
  ...r,
  size_bytes: Number(r.size_bytes),
  created_at: Number(r.created_at),
  expires_at: Number(r.expires_at),
});
const release = (r: ReleaseRow): ReleaseRow => ({ ...r, size_bytes: Number(r.size_bytes), created_at: Number(r.created_at) });

export class MachinesRepo {
  constructor(readonly db: Db) {}

  async insert(row: MachineRow): Promise<void> {
    await this.db.insertInto('machines').values(row).execute();
  }

  async get(id: string): Promise<MachineRow | undefined> {
    const r = await this.db.selectFrom('machines').selectAll().where('id', '=', id).executeTakeFirst();
    return r && machine(r);
  }

  async bySandbox(sandboxId: string): Promise<MachineRow | undefined> {
    const r = await this.db
      .selectFrom('machines')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .where('status', '!=', 'deleted')
      .executeTakeFirst();
    return r && machine(r);
  }

  async list(ownerId: string, workspaces?: readonly string[]): Promise<MachineRow[]> {
    let q = this.db.selectFrom('machines').selectAll().where('owner_id', '=', ownerId).where('status', '!=', 'deleted');
    if (workspaces) q = q.where('workspace_id', 'in', workspaces);
    return (await q.orderBy('id').execute()).map(machine);
  }

  /** Every live machine (restart of nube: supervisors to re-adopt). */
  /** Live machines held by `nodeId` (and those from before nodes, which are the node's that runs them). */
  async live(nodeId: string): Promise<MachineRow[]> {
    const rows = await this.db
      .selectFrom('machines')
      .selectAll()
      .where('status', '!=', 'deleted')
      .where((eb) => eb.or([eb('node_id', '=', nodeId), eb('node_id', 'is', null)]))
      .orderBy('id')
      .execute();
    return rows.map(machine);
  }

  async nodeOf(id: string): Promise<string | null | undefined> {
    const r = await this.db.selectFrom('machines').select('node_id').where('id', '=', id).executeTakeFirst();
    return r ? r.node_id : undefined;
  }

  /** Machines from before nodes: recorded on their box's node once that is known. */
  async unplaced(): Promise<Pick<MachineRow, 'id' | 'sandbox_id'>[]> {
    return this.db.selectFrom('machines').select(['id', 'sandbox_id']).where('node_id', 'is', null).where('status', '!=', 'deleted').execute();
  }

  async count(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('machines')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .where('status', '!=', 'deleted')
      .where('order_id', 'is', null)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Boxes of any account held as reserved cores (one host: the sum may not pass its cores). */
  /** Reserved-CPU machines on one node (rows from before nodes count everywhere). */
  async reservedRows(nodeId: string): Promise<Pick<MachineRow, 'tier'>[]> {
    return this.db
      .selectFrom('machines')
      .select('tier')
      .where('cpu_mode', '=', 'reserved')
      .where('status', '!=', 'deleted')
      .where((eb) => eb.or([eb('node_id', '=', nodeId), eb('node_id', 'is', null)]))
      .execute();
  }

  async update(id: string, patch: Partial<MachineRow>): Promise<void> {
    await this.db
      .updateTable('machines')
      .set({ ...patch, updated_at: Date.now() })
      .where('id', '=', id)
      .execute();
  }

  /** Replaces app_watch only while it still holds `expected`; false when another writer changed it first. */
  async swapAppWatch(id: string, expected: string | null, next: string): Promise<boolean> {
    const r = await this.db
      .updateTable('machines')
      .set({ app_watch: next })
      .where('id', '=', id)
      .where((eb) => (expected === null ? eb('app_watch', 'is', null) : eb('app_watch', '=', expected)))
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  /** Turns a live machine into its tombstone; false when another call did it first. */
  async markDeleted(id: string): Promise<boolean> {
    const r = await this.db
      .updateTable('machines')
      .set({ status: 'deleted', supervisor_exec_id: null, secrets_sealed: null, updated_at: Date.now() })
      .where('id', '=', id)
      .where('status', '!=', 'deleted')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async insertOrder(row: OrderRow): Promise<void> {
    await this.db.insertInto('machine_orders').values(row).execute();
  }

  async orderByToken(tokenHash: string): Promise<OrderRow | undefined> {
    const r = await this.db.selectFrom('machine_orders').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
    return r && order(r);
  }

  async orderBySession(sessionId: string): Promise<OrderRow | undefined> {
    const r = await this.db.selectFrom('machine_orders').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
    return r && order(r);
  }

  /** Marks a pending order paid; false when it was paid already (a second confirmation). */
  async markPaid(id: string, at: number, db: Kysely<Tables> = this.db): Promise<boolean> {
    const r = await db
      .updateTable('machine_orders')
      .set({ status: 'paid', paid_at: at })
      .where('id', '=', id)
      .where('status', '=', 'pending')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async setOrderMachine(id: string, machineId: string): Promise<void> {
    await this.db.updateTable('machine_orders').set({ machine_id: machineId }).where('id', '=', id).execute();
  }

  async insertRelease(row: ReleaseRow): Promise<void> {
    await this.db.insertInto('machine_releases').values(row).execute();
  }

  async releases(machineId: string): Promise<ReleaseRow[]> {
    const rows = await this.db
      .selectFrom('machine_releases')
      .selectAll()
      .where('machine_id', '=', machineId)
      .orderBy('version', 'desc')
      .execute();
    return rows.map(release);
  }

  async release(machineId: string, id: string): Promise<ReleaseRow | undefined> {
    const r = await this.db
      .selectFrom('machine_releases')
      .selectAll()
      .where('machine_id', '=', machineId)
      .where('id', '=', id)
      .executeTakeFirst();
    return r && release(r);
  }

  async nextVersion(machineId: string): Promise<number> {
    const r = await this.db
      .selectFrom('machine_releases')
      .select((eb) => eb.fn.max('version').as('v'))
      .where('machine_id', '=', machineId)
      .executeTakeFirst();
    return Number(r?.v ?? 0) + 1;
  }

  async updateRelease(id: string, patch: Partial<ReleaseRow>): Promise<void> {
    await this.db.updateTable('machine_releases').set(patch).where('id', '=', id).execute();
  }

  async deleteReleases(machineId: string): Promise<void> {
    await this.db.deleteFrom('machine_releases').where('machine_id', '=', machineId).execute();
  }

  async insertBackup(row: BackupRow): Promise<void> {
    await this.db.insertInto('machine_backups').values(row).execute();
  }

  async updateBackup(id: string, patch: Partial<BackupRow>): Promise<void> {
    await this.db.updateTable('machine_backups').set(patch).where('id', '=', id).execute();
  }

  async backups(machineId: string): Promise<BackupRow[]> {
    const rows = await this.db
      .selectFrom('machine_backups')
      .selectAll()
      .where('machine_id', '=', machineId)
      .orderBy('created_at', 'desc')
      .execute();
    return rows.map(backup);
  }

  async deleteBackup(id: string): Promise<void> {
    await this.db.deleteFrom('machine_backups').where('id', '=', id).execute();
  }
}

export const machineWorkspaceMigrations: Record<string, Migration> = {
  '0276-machines-workspace': workspaceColumnMigration('machines', 'owner_id'),
};
