import type { Kysely, Migration } from 'kysely';
import type { Tables } from '../../store/schema.js';

export type TemplateStatus = 'building' | 'ready' | 'failed' | 'canceled';

export interface TemplatesTable {
  /** Also the sandboxes driver's name for it (`tpl_...`). */
  id: string;
  owner_id: string;
  name: string;
  /** JSON: { fromImage } (later { dockerfile, context }). */
  source: string;
  /** registryAuth, sealed with the secret box; null without. */
  registry_auth: string | null;
  /** JSON: cpuCount, memoryMB, diskMB, startCmd, readyCmd, env, workdir, user. */
  settings: string;
  status: TemplateStatus;
  /** Where a build is: queued, resolving, pulling, unpacking, done. */
  phase: string;
  /** JSON: { percent, layersDone, layersTotal, bytesDone, bytesTotal } */
  progress: string;
  error: string | null;
  error_code: string | null;
  /** Manifest digest of the image built from. */
  digest: string | null;
  /** The driver's build id of the current root filesystem. */
  build: string | null;
  size_bytes: number;
  /** JSON: [{ digest, size, mediaType }] */
  layers: string;
  /** JSON: the image's own start settings (env, cmd, entrypoint, workdir, user, exposedPorts). */
  image_config: string | null;
  /** A Dockerfile's: the driver's template its layers stand on, when not its own (FROM a template). */
  base_template: string | null;
  /** A Dockerfile's last layer (a snapshot over the template); null: the root filesystem alone. */
  top_layer: string | null;
  created_at: number;
  updated_at: number;
  built_at: number | null;
}

export interface TemplateLogTable {
  template_id: string;
  seq: number;
  at: number;
  line: string;
}

/** A Dockerfile step's layer (a snapshot of the sandboxes driver), by its cache key. */
export interface TemplateLayerTable {
  template_id: string;
  key: string;
  snapshot_id: string;
  created_at: number;
}

declare module '../../store/schema.js' {
  interface Tables {
    templates: TemplatesTable;
    template_build_logs: TemplateLogTable;
    template_layers: TemplateLayerTable;
  }
}

export const templatesMigrations: Record<string, Migration> = {
  '0240-templates': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('templates')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('source', 'text', (c) => c.notNull())
        .addColumn('registry_auth', 'text')
        .addColumn('settings', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('phase', 'text', (c) => c.notNull())
        .addColumn('progress', 'text', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('error_code', 'text')
        .addColumn('digest', 'text')
        .addColumn('build', 'text')
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('layers', 'text', (c) => c.notNull())
        .addColumn('image_config', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('built_at', 'bigint')
        .addUniqueConstraint('templates_owner_name', ['owner_id', 'name'])
        .execute();
      await db.schema
        .createTable('template_build_logs')
        .addColumn('template_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('line', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('template_build_logs_pk', ['template_id', 'seq'])
        .execute();
    },
  },
  '0241-template-layers': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('template_layers')
        .addColumn('template_id', 'text', (c) => c.notNull())
        .addColumn('key', 'text', (c) => c.notNull())
        .addColumn('snapshot_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('template_layers_pk', ['template_id', 'key'])
        .execute();
      await db.schema.alterTable('templates').addColumn('base_template', 'text').execute();
      await db.schema.alterTable('templates').addColumn('top_layer', 'text').execute();
    },
  },
};

const num = (r: TemplatesTable): TemplatesTable => ({
  ...r,
  size_bytes: Number(r.size_bytes),
  created_at: Number(r.created_at),
  updated_at: Number(r.updated_at),
  built_at: r.built_at === null ? null : Number(r.built_at),
});

export class TemplatesRepo {
  /** Next log line number per template (this process writes a build's lines; a restart reads the last). */
  private readonly seqs = new Map<string, number>();

  constructor(private readonly db: Kysely<Tables>) {}

  async insert(row: TemplatesTable): Promise<void> {
    await this.db.insertInto('templates').values(row).execute();
  }

  async get(id: string): Promise<TemplatesTable | undefined> {
    const r = await this.db.selectFrom('templates').selectAll().where('id', '=', id).executeTakeFirst();
    return r && num(r);
  }

  async owned(ownerId: string, id: string): Promise<TemplatesTable | undefined> {
    const r = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return r && num(r);
  }

  async byName(ownerId: string, name: string): Promise<TemplatesTable | undefined> {
    const r = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('name', '=', name)
      .executeTakeFirst();
    return r && num(r);
  }

  async list(ownerId: string): Promise<TemplatesTable[]> {
    const rows = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .orderBy('id', 'desc')
      .execute();
    return rows.map(num);
  }

  async update(id: string, patch: Partial<TemplatesTable>): Promise<void> {
    await this.db
      .updateTable('templates')
      .set({ ...patch, updated_at: Date.now() })
      .where('id', '=', id)
      .execute();
  }

  /** Sets `patch` only while the template is still `building` (a cancel or delete meanwhile wins). */
  async updateBuilding(id: string, patch: Partial<TemplatesTable>): Promise<boolean> {
    const r = await this.db
      .updateTable('templates')
      .set({ ...patch, updated_at: Date.now() })
      .where('id', '=', id)
      .where('status', '=', 'building')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom('template_build_logs').where('template_id', '=', id).execute();
    await this.db.deleteFrom('templates').where('id', '=', id).execute();
  }

  async sizeFor(ownerId: string): Promise<number> {
    const r = await this.db
      .selectFrom('templates')
      .select((eb) => eb.fn.sum<number>('size_bytes').as('n'))
      .where('owner_id', '=', ownerId)
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  async log(id: string, line: string): Promise<void> {
    let seq = this.seqs.get(id);
    if (seq === undefined) {
      const r = await this.db
        .selectFrom('template_build_logs')
        .select((eb) => eb.fn.max<number>('seq').as('m'))
        .where('template_id', '=', id)
        .executeTakeFirst();
      seq = Number(r?.m ?? 0);
    }
    seq++;
    this.seqs.set(id, seq);
    await this.db
      .insertInto('template_build_logs')
      .values({ template_id: id, seq, at: Date.now(), line: line.slice(0, 4000) })
      .execute();
  }

  /** A new build starts its log afresh. */
  async clearLog(id: string): Promise<void> {
    this.seqs.delete(id);
    await this.db.deleteFrom('template_build_logs').where('template_id', '=', id).execute();
  }

  async logsAfter(id: string, seq: number, limit = 500): Promise<TemplateLogTable[]> {
    const rows = await this.db
      .selectFrom('template_build_logs')
      .selectAll()
      .where('template_id', '=', id)
      .where('seq', '>', seq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ ...r, seq: Number(r.seq), at: Number(r.at) }));
  }

  async layer(templateId: string, key: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom('template_layers')
      .select('snapshot_id')
      .where('template_id', '=', templateId)
      .where('key', '=', key)
      .executeTakeFirst();
    return r?.snapshot_id;
  }

  async putLayer(templateId: string, key: string, snapshotId: string): Promise<void> {
    await this.db.deleteFrom('template_layers').where('template_id', '=', templateId).where('key', '=', key).execute();
    await this.db
      .insertInto('template_layers')
      .values({ template_id: templateId, key, snapshot_id: snapshotId, created_at: Date.now() })
      .execute();
  }

  /** A template's cached layers, newest first (a layer stands on older ones). */
  async layersOf(templateId: string): Promise<string[]> {
    const rows = await this.db
      .selectFrom('template_layers')
      .select('snapshot_id')
      .where('template_id', '=', templateId)
      .orderBy('created_at', 'desc')
      .execute();
    return rows.map((r) => r.snapshot_id);
  }

  /** Every template's layers (the sandboxes area never collects them). */
  async allLayers(): Promise<Set<string>> {
    const rows = await this.db.selectFrom('template_layers').select('snapshot_id').execute();
    return new Set(rows.map((r) => r.snapshot_id));
  }

  async dropLayer(templateId: string, snapshotId: string): Promise<void> {
    await this.db
      .deleteFrom('template_layers')
      .where('template_id', '=', templateId)
      .where('snapshot_id', '=', snapshotId)
      .execute();
  }
}
