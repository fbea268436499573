import type { Kysely } from 'kysely';
import type { RefusalAggregator } from './refusals.js';
import type { Principal } from '../../platform/auth.js';
import { cursorAfter, pageOf } from '../../platform/cursor-page.js';
import type { JobQueue } from '../../platform/jobs-contract.js';
import { PLANS, type PlanName } from '../../platform/plans.js';
import type { Dialect } from '../../store/db.js';
import type { Tables } from '../../store/schema.js';
import { pruneChain, type VerifyResult, verifyChains } from './chain.js';
import type { AuditEntriesTable } from './tables.js';

export interface AuditQuery {
  since?: number;
  until?: number;
  operation?: string;
  keyId?: string;
  resourceId?: string;
  cursor?: string;
}

export const JOB_PRUNE = 'audit.prune';
const PRUNE_EVERY_MS = 60 * 60 * 1000;
const DAY = 24 * 60 * 60 * 1000;
/** Rows per read of an export. */
const EXPORT_PAGE = 1000;

export function entryOut(e: AuditEntriesTable) {
  return {
    id: e.id,
    time: new Date(Number(e.created_at)).toISOString(),
    accountId: e.owner_id,
    workspaceId: e.workspace_id,
    keyId: e.key_id,
    keyName: e.key_name,
    credential: e.scheme,
    operation: e.operation,
    method: e.method,
    resourceId: e.resource_id,
    status: Number(e.status),
    errorCode: e.error_code,
    sourceIp: e.source_ip,
    userAgent: e.user_agent,
    requestId: e.request_id,
    via: e.via as 'rest' | 'mcp',
    seq: Number(e.seq),
    hash: e.hash,
  };
}

export class AuditService {
  constructor(
    private readonly db: Kysely<Tables>,
    private readonly dialect: Dialect,
    private readonly key: Buffer,
    private readonly planOf: (ownerId: string) => Promise<PlanName>,
  ) {}

  /** The counts of refusals naming no account, once the recorder is installed (flushed at close). */
  refusals: RefusalAggregator | null = null;

  private rows(ownerId: string, q: AuditQuery, before: string | undefined, limit: number) {
    let s = this.db.selectFrom('audit_entries').selectAll().where('owner_id', '=', ownerId);
    // The cursor names the last entry shown; the page goes on below its place in the chain.
    if (before) s = s.where('seq', '<', (eb) => eb.selectFrom('audit_entries as c').select('c.seq').where('c.id', '=', before).where('c.owner_id', '=', ownerId));
    if (q.since !== undefined) s = s.where('created_at', '>=', q.since);
    if (q.until !== undefined) s = s.where('created_at', '<', q.until);
    if (q.operation) s = s.where('operation', '=', q.operation);
    if (q.keyId) s = s.where('key_id', '=', q.keyId);
    if (q.resourceId) s = s.where('resource_id', '=', q.resourceId);
    return s.orderBy('seq', 'desc').limit(limit).execute();
  }

  /** The account's entries, newest first, filtered. */
  async list(p: Principal, q: AuditQuery & { limit: number }) {
    const rows = await this.rows(p.ownerId, q, cursorAfter(q.cursor, 'aud'), q.limit + 1);
    return pageOf(rows, q.limit, entryOut);
  }

  /** Every entry the filters select, newest first, one JSON object a line, read a page at a time. */
  async *export(p: Principal, q: AuditQuery): AsyncIterable<string> {
    let before = cursorAfter(q.cursor, 'aud');
    for (;;) {
      const rows = await this.rows(p.ownerId, q, before, EXPORT_PAGE);
      if (rows.length) yield `${rows.map((r) => JSON.stringify(entryOut(r))).join('\n')}\n`;
      if (rows.length < EXPORT_PAGE) return;
      before = rows.at(-1)!.id;
    }
  }

  verify(accountId?: string): Promise<VerifyResult> {
    return verifyChains(this.db, this.key, accountId);
  }

  /** Drops each account's entries past its plan's retention (refusals that named no account: the shortest). */
  async prune(now = Date.now()): Promise<number> {
    const owners = await this.db.selectFrom('audit_chains').select('owner_id').execute();
    let removed = 0;
    for (const { owner_id } of owners) {
      const days = owner_id === '' ? PLANS.byte.auditRetentionDays : PLANS[await this.planOf(owner_id)].auditRetentionDays;
      removed += await pruneChain(this.db, this.dialect, owner_id, now - days * DAY);
    }
    return removed;
  }

  /** Retention runs as a durable job, once an hour across replicas (one job under one key). */
  registerPruning(jobs: JobQueue): Promise<string> {
    jobs.register(JOB_PRUNE, async () => {
      await this.prune();
      await jobs.enqueue(JOB_PRUNE, {}, { key: JOB_PRUNE, onDuplicate: 'replace', runAt: Date.now() + PRUNE_EVERY_MS });
    });
    return jobs.enqueue(JOB_PRUNE, {}, { key: JOB_PRUNE, runAt: Date.now() + PRUNE_EVERY_MS });
  }
}
