import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../../store/schema.js';

// Raw TCP/UDP exposures: one row per (sandbox, port inside, protocol), holding the host port it took.
// The rows are the truth: listeners are opened again from them when nube starts.

interface SandboxRawPortsTable {
  sandbox_id: string;
  owner_id: string;
  port: number;
  protocol: string;
  public_port: number;
  created_at: number;
}

declare module '../../../store/schema.js' {
  interface Tables {
    sandbox_raw_ports: SandboxRawPortsTable;
  }
}

export type RawPortRow = SandboxRawPortsTable;

export const rawPortsMigrations: Record<string, Migration> = {
  '0102-sandboxes-raw-ports': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('sandbox_raw_ports')
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('port', 'integer', (c) => c.notNull())
        .addColumn('protocol', 'text', (c) => c.notNull())
        .addColumn('public_port', 'integer', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('sandbox_raw_ports_pk', ['sandbox_id', 'port', 'protocol'])
        .execute();
      // A host port serves one exposure per protocol, whoever asks.
      await db.schema
        .createIndex('sandbox_raw_ports_public')
        .on('sandbox_raw_ports')
        .columns(['public_port', 'protocol'])
        .unique()
        .execute();
      await db.schema.createIndex('sandbox_raw_ports_owner').on('sandbox_raw_ports').column('owner_id').execute();
    },
  },
};

const fix = (r: RawPortRow): RawPortRow => ({ ...r, created_at: Number(r.created_at) });

export class RawPortsRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async get(sandboxId: string, port: number, protocol: string): Promise<RawPortRow | undefined> {
    const r = await this.db
      .selectFrom('sandbox_raw_ports')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .where('port', '=', port)
      .where('protocol', '=', protocol)
      .executeTakeFirst();
    return r ? fix(r) : undefined;
  }
  async ofSandbox(sandboxId: string): Promise<RawPortRow[]> {
    const rows = await this.db
      .selectFrom('sandbox_raw_ports')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .orderBy('port')
      .execute();
    return rows.map(fix);
  }
  async all(): Promise<RawPortRow[]> {
    return (await this.db.selectFrom('sandbox_raw_ports').selectAll().execute()).map(fix);
  }
  async countFor(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('sandbox_raw_ports')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }
  async usedPorts(protocol: string): Promise<Set<number>> {
    const rows = await this.db.selectFrom('sandbox_raw_ports').select('public_port').where('protocol', '=', protocol).execute();
    return new Set(rows.map((r) => r.public_port));
  }
  async insert(row: RawPortRow): Promise<void> {
    await this.db.insertInto('sandbox_raw_ports').values(row).execute();
  }
  async delete(sandboxId: string, port: number, protocol: string): Promise<void> {
    await this.db
      .deleteFrom('sandbox_raw_ports')
      .where('sandbox_id', '=', sandboxId)
      .where('port', '=', port)
      .where('protocol', '=', protocol)
      .execute();
  }
  async deleteSandbox(sandboxId: string): Promise<void> {
    await this.db.deleteFrom('sandbox_raw_ports').where('sandbox_id', '=', sandboxId).execute();
  }
}
