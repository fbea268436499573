// Datasets: rows that web extractions and crawls append to, read page by page, exported as CSV or
// NDJSON, and queried with SQL. A dataset's rows live in a database of the owner's (the databases
// area's: its executors, limits and storage cap; it shows in GET /databases as `dataset-<name>` and
// counts in the plan's databases), table `rows` (each row whole, as JSON) and view `items` (a column
// per schema property). Queries go through the same executors, read-only by SQLite's own judgement.
import { Readable } from 'node:stream';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { QueryRequest, QueryResult } from '../databases/engine/schemas.js';
import type { DatabasesService } from '../databases/service.js';
import type { DatasetsRepo, DatasetsTable } from './repo.js';
import { inferSchema, itemsView, mismatch, ROWS_DDL, type RowSchema, readOnlyProblem } from './schema.js';

/** Rows one append writes in one statement (the databases area's import cap is 10,000). */
const IMPORT_CHUNK = 1000;
/** Rows read per page of an export. */
const EXPORT_PAGE = 1000;
/** Rows the schema is inferred from. */
const INFER_FROM = 20;

export interface AppendResult {
  added: number;
  rejected: { index: number; reason: string }[];
}

type Row = Record<string, unknown>;

const iso = (ms: number) => new Date(Number(ms)).toISOString();

function csvCell(v: unknown): string {
  if (v === null || v === undefined) return '';
  let s = typeof v === 'string' ? v : JSON.stringify(v);
  // A text cell a spreadsheet would run as a formula is kept as text (OWASP's CSV injection advice).
  if (typeof v === 'string' && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export class DatasetsService {
  constructor(
    readonly repo: DatasetsRepo,
    private readonly databases: () => DatabasesService,
    private readonly planOf: (ownerId: string) => Promise<Principal['plan']>,
  ) {}

  view(r: DatasetsTable) {
    return {
      id: r.id,
      name: r.name,
      description: r.description,
      schema: r.schema === null ? null : (JSON.parse(r.schema) as RowSchema),
      schemaGiven: r.schema_given === 1,
      databaseId: r.database_id,
      rowCount: Number(r.row_count),
      createdAt: iso(r.created_at),
      updatedAt: iso(r.updated_at),
    };
  }

  async create(p: Principal, input: { name: string; description?: string; schema?: RowSchema }) {
    if (await this.repo.byName(p.ownerId, input.name)) {
      throw errors.conflict(`a dataset named ${input.name} exists`, 'NameTaken');
    }
    const db = await this.databases().create(p, {
      name: `dataset-${input.name}`,
      description: `Rows of dataset ${input.name}`,
    });
    try {
      await this.databases().query(p, db.id, {
        statements: [...ROWS_DDL, ...(input.schema ? itemsView(input.schema) : [])].map((sql) => ({ sql })),
      });
      const now = Date.now();
      const row: DatasetsTable = {
        id: newId('dset'),
        owner_id: p.ownerId,
        name: input.name,
        description: input.description ?? null,
        schema: input.schema ? JSON.stringify(input.schema) : null,
        schema_given: input.schema ? 1 : 0,
        database_id: db.id,
        row_count: 0,
        created_at: now,
        updated_at: now,
      };
      await this.repo.insert(row);
      return this.view(row);
    } catch (e) {
      await this.databases()
        .delete(p, db.id)
        .catch(() => {});
      throw e;
    }
  }

  async owned(p: Principal, id: string): Promise<DatasetsTable> {
    const r = await this.repo.owned(p.ownerId, id);
    if (!r) throw errors.notFound('dataset');
    return r;
  }

  async get(p: Principal, id: string) {
    return this.view(await this.owned(p, id));
  }

  async list(p: Principal) {
    return { items: (await this.repo.list(p.ownerId)).map((r) => this.view(r)) };
  }

  /** The dataset and its database go. */
  async delete(p: Principal, id: string) {
    const r = await this.owned(p, id);
    await this.databases()
      .delete(p, r.database_id)
      .catch((e: unknown) => {
        // Its database was deleted already (through /databases): the dataset goes all the same.
        if (!(e instanceof ApiError && e.status === 404)) throw e;
      });
    await this.repo.remove(p.ownerId, id);
    return { ok: true as const };
  }

  /** Runs SQL on the dataset's database, mapping a database deleted under it to words. */
  private async sql(p: Principal, r: DatasetsTable, body: Parameters<DatabasesService['query']>[2]) {
    try {
      return await this.databases().query(p, r.database_id, body);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        throw errors.conflict(
          `the database of dataset ${r.name} (${r.database_id}) was deleted; delete the dataset and make it again`,
          'DatasetDatabaseGone',
        );
      }
      throw e;
    }
  }

  /**
   * Appends rows (web extractions and crawls call this for their owner). Rows that do not fit a given
   * schema are rejected with the reason; the first rows of a dataset without one give it its schema.
   */
  async append(
    ownerId: string,
    id: string,
    rows: { data: Row; url?: string | null }[],
    jobId: string | null,
  ): Promise<AppendResult> {
    const p: Principal = { scheme: 'owner', ownerId, plan: await this.planOf(ownerId) };
    let r = await this.owned(p, id);
    const rejected: AppendResult['rejected'] = [];
    const schema = r.schema === null ? null : (JSON.parse(r.schema) as RowSchema);
    const fit = rows.filter((row, index) => {
      const why = r.schema_given === 1 && schema ? mismatch(schema, row.data) : null;
      if (why) rejected.push({ index, reason: why });
      return why === null;
    });
    if (!fit.length) return { added: 0, rejected };
    if (schema === null) {
      const inferred = inferSchema(fit.slice(0, INFER_FROM).map((x) => x.data));
      await this.sql(p, r, { statements: itemsView(inferred).map((sql) => ({ sql })) });
      await this.repo.setSchema(r.id, JSON.stringify(inferred));
      r = await this.owned(p, id);
    }
    const now = Date.now();
    for (let i = 0; i < fit.length; i += IMPORT_CHUNK) {
      const chunk = fit.slice(i, i + IMPORT_CHUNK);
      await this.sql(p, r, {
        table: 'rows',
        columns: ['data', 'url', 'job_id', 'added_at'],
        rows: chunk.map((x) => [JSON.stringify(x.data), x.url ?? null, jobId, now]),
      });
      await this.repo.added(r.id, chunk.length, now);
    }
    return { added: fit.length, rejected };
  }

  /** The one check the web area makes before it starts a job that will append. */
  async assertAppendable(p: Principal, id: string): Promise<void> {
    await this.owned(p, id);
  }

  async rows(p: Principal, id: string, q: { limit: number; cursor?: string }) {
    const r = await this.owned(p, id);
    const after = q.cursor === undefined ? 0 : Number(Buffer.from(q.cursor, 'base64url').toString('utf8'));
    if (!Number.isSafeInteger(after) || after < 0)
      throw errors.badRequest('invalid cursor', [
        { path: ['cursor'], message: 'not a cursor from this list' },
      ]);
    const page = await this.page(p, r, after, q.limit + 1);
    const items = page.slice(0, q.limit);
    const hasMore = page.length > q.limit;
    return {
      items,
      nextCursor: hasMore ? Buffer.from(String(items.at(-1)!.id)).toString('base64url') : null,
      hasMore,
    };
  }

  private async page(p: Principal, r: DatasetsTable, after: number, limit: number) {
    const res = await this.sql(p, r, {
      sql: 'SELECT id, data, url, added_at FROM rows WHERE id > ? ORDER BY id LIMIT ?',
      args: [after, limit],
    });
    if (!('rows' in res)) throw new Error('a dataset page answered without rows');
    return res.rows.map(([rowId, data, url, addedAt]) => ({
      id: Number(rowId),
      data: JSON.parse(String(data)) as Row,
      url: url === null ? null : String(url),
      addedAt: iso(Number(addedAt)),
    }));
  }

  /**
   * Every row, streamed page by page: NDJSON (a row's JSON per line) or CSV (a column per schema
   * property); `_row` and `_addedAt` beside the row's own properties, which keep their names.
   */
  async export(p: Principal, id: string, format: 'csv' | 'ndjson') {
    const r = await this.owned(p, id);
    const schema = r.schema === null ? null : (JSON.parse(r.schema) as RowSchema);
    const keys = Object.keys(schema?.properties ?? {});
    const self = this;
    async function* lines() {
      if (format === 'csv') yield `${['_row', '_addedAt', ...keys].map(csvCell).join(',')}\r\n`;
      let after = 0;
      for (;;) {
        const page = await self.page(p, r, after, EXPORT_PAGE);
        for (const row of page) {
          yield format === 'csv'
            ? `${[row.id, row.addedAt, ...keys.map((k) => row.data[k])].map(csvCell).join(',')}\r\n`
            : `${JSON.stringify({ _row: row.id, _addedAt: row.addedAt, ...row.data })}\n`;
        }
        if (page.length < EXPORT_PAGE) return;
        after = page.at(-1)!.id;
      }
    }
    return { name: r.name, stream: Readable.from(lines()) };
  }

  /** Read-only SQL on the dataset (`rows`, `items`), through the databases area's executors. */
  async query(p: Principal, id: string, body: QueryRequest): Promise<QueryResult> {
    const r = await this.owned(p, id);
    const problem = readOnlyProblem(body.sql, r.schema === null ? null : (JSON.parse(r.schema) as RowSchema));
    if (problem) throw errors.badRequest(problem, [{ path: ['body', 'sql'], message: problem }], 'ReadOnly');
    const out = await this.sql(p, r, body);
    if (!('rows' in out)) throw new Error('a single statement answered as a batch');
    return out;
  }
}
