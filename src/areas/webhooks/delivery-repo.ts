import { type Kysely, sql } from 'kysely';
import type { Dialect } from '../../store/db.js';
import type { Tables } from '../../store/schema.js';
import type { AttemptRecord, DeliveryRow, DeliveryStatus, WebhookStatus } from './repo.js';

type Db = Kysely<Tables>;

/** Attempts kept per delivery: enough for a whole retry schedule plus a few redeliveries. */
const LOG_MAX = 20;

export interface DeliveryTarget extends DeliveryRow {
  url: string;
  secret: string;
  webhook_status: WebhookStatus;
}

export interface AttemptOutcome {
  record: AttemptRecord;
  ok: boolean;
  /** Wait before the next attempt, or undefined when the schedule is exhausted. */
  retryInMs: number | undefined;
}

/** Queries on webhook_deliveries; each write that belongs to one attempt runs in the caller's transaction. */
export class DeliveriesRepo {
  constructor(readonly db: Db) {}

  /** Inserts the rows not yet present (the id is derived from the event, so replicas dedupe); returns new ids. */
  async insertNew(trx: Db, rows: DeliveryRow[]): Promise<Set<string>> {
    if (!rows.length) return new Set();
    const inserted = await trx
      .insertInto('webhook_deliveries')
      .values(rows)
      .onConflict((oc) => oc.column('id').doNothing())
      .returning('id')
      .execute();
    return new Set(inserted.map((r) => r.id));
  }

  /** Deliveries with their webhook's URL, sealed secret and status, in id order. */
  targets(ids: string[]): Promise<DeliveryTarget[]> {
    if (!ids.length) return Promise.resolve([]);
    return this.db
      .selectFrom('webhook_deliveries as d')
      .innerJoin('webhooks as w', 'w.id', 'd.webhook_id')
      .selectAll('d')
      .select(['w.url as url', 'w.secret as secret', 'w.status as webhook_status'])
      .where('d.id', 'in', ids)
      .orderBy('d.id')
      .execute();
  }

  async markSkipped(id: string, reason: string, now: number): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({ status: 'skipped', next_attempt_at: null, last_error: reason, updated_at: now })
      .where('id', '=', id)
      .where('status', '=', 'pending')
      .execute();
  }

  /** When a webhook pauses, its waiting retries are dropped (they can be redelivered). */
  async skipPending(trx: Db, webhookId: string, reason: string, now: number): Promise<void> {
    await trx
      .updateTable('webhook_deliveries')
      .set({ status: 'skipped', next_attempt_at: null, last_error: reason, updated_at: now })
      .where('webhook_id', '=', webhookId)
      .where('status', '=', 'pending')
      .execute();
  }

  /**
   * Records attempt `record.attempt` on the webhook (failure counter, auto-pause at `pauseAfter`) and on
   * the delivery. Returns the delivery's new status, or undefined when that attempt was already recorded
   * (a job re-run after a crash) so the caller schedules nothing.
   */
  async recordAttempt(
    trx: Db,
    d: DeliveryRow,
    o: AttemptOutcome,
    pauseAfter: number,
  ): Promise<{ status: DeliveryStatus; paused: boolean } | undefined> {
    const now = Math.round(o.record.at + o.record.durationMs);
    const hook = await trx
      .updateTable('webhooks')
      .set((eb) =>
        o.ok
          ? { failure_count: 0, last_delivery_at: now, last_error: null }
          : {
              failure_count: eb('failure_count', '+', 1),
              status: eb
                .case()
                .when('failure_count', '>=', pauseAfter - 1)
                .then('PAUSED' as WebhookStatus)
                .else(eb.ref('status'))
                .end(),
              last_delivery_at: now,
              last_error: o.record.error ?? `HTTP ${o.record.statusCode}`,
            },
      )
      .where('id', '=', d.webhook_id)
      .returning(['status'])
      .executeTakeFirst();
    if (!hook) return undefined;
    const paused = hook.status === 'PAUSED';
    const status: DeliveryStatus = o.ok
      ? 'succeeded'
      : paused
        ? 'skipped'
        : o.retryInMs === undefined
          ? 'failed'
          : 'pending';
    const log = [...(JSON.parse(d.log) as AttemptRecord[]), o.record].slice(-LOG_MAX);
    const res = await trx
      .updateTable('webhook_deliveries')
      .set({
        status,
        attempts: o.record.attempt,
        next_attempt_at: status === 'pending' ? now + (o.retryInMs ?? 0) : null,
        last_status_code: o.record.statusCode,
        last_error: o.ok ? null : (o.record.error ?? `HTTP ${o.record.statusCode}`),
        log: JSON.stringify(log),
        updated_at: now,
      })
      .where('id', '=', d.id)
      .where('attempts', '=', o.record.attempt - 1)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) return undefined;
    if (paused && !o.ok) await this.skipPending(trx, d.webhook_id, 'webhook paused', now);
    return { status, paused };
  }

  /**
   * Records successful attempts of webhooks that had only successes in this batch: one statement per
   * webhook and, on PostgreSQL, one for all the deliveries. The same outcome as recordAttempt for each,
   * in far fewer round trips (a round trip to PostgreSQL costs more than the row it writes).
   */
  async recordSuccesses(trx: Db, dialect: Dialect, items: { d: DeliveryRow; record: AttemptRecord }[]): Promise<void> {
    if (!items.length) return;
    const endOf = (r: AttemptRecord) => Math.round(r.at + r.durationMs);
    const lastByHook = new Map<string, number>();
    for (const { d, record } of items) lastByHook.set(d.webhook_id, Math.max(lastByHook.get(d.webhook_id) ?? 0, endOf(record)));
    for (const [id, at] of lastByHook) {
      await trx.updateTable('webhooks').set({ failure_count: 0, last_delivery_at: at, last_error: null }).where('id', '=', id).execute();
    }
    const rows = items.map(({ d, record }) => ({
      id: d.id,
      attempt: record.attempt,
      code: record.statusCode,
      log: JSON.stringify([...(JSON.parse(d.log) as AttemptRecord[]), record].slice(-LOG_MAX)),
      now: endOf(record),
    }));
    if (dialect === 'postgres') {
      const values = sql.join(rows.map((r) => sql`(${r.id}::text, ${r.attempt}::int, ${r.code}::int, ${r.log}::text, ${r.now}::bigint)`));
      // Guarded like recordAttempt: a row whose attempt is already recorded (a re-run job) is left alone.
      await sql`UPDATE webhook_deliveries AS d
        SET status = 'succeeded', attempts = v.attempt, next_attempt_at = NULL, last_status_code = v.code,
            last_error = NULL, log = v.log, updated_at = v.now
        FROM (VALUES ${values}) AS v(id, attempt, code, log, now)
        WHERE d.id = v.id AND d.attempts = v.attempt - 1`.execute(trx);
      return;
    }
    // SQLite runs in process: a statement per row costs microseconds.
    for (const r of rows) {
      await trx
        .updateTable('webhook_deliveries')
        .set({ status: 'succeeded', attempts: r.attempt, next_attempt_at: null, last_status_code: r.code, last_error: null, log: r.log, updated_at: r.now })
        .where('id', '=', r.id)
        .where('attempts', '=', r.attempt - 1)
        .execute();
    }
  }

  get(ownerId: string, webhookId: string, id: string): Promise<DeliveryRow | undefined> {
    return this.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('webhook_id', '=', webhookId)
      .where('id', '=', id)
      .executeTakeFirst();
  }

  /** Newest first; `before` is the id of the last row of the previous page. */
  list(webhookId: string, p: { limit: number; before?: string; status?: DeliveryStatus }): Promise<DeliveryRow[]> {
    let q = this.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('webhook_id', '=', webhookId)
      .orderBy('id', 'desc')
      .limit(p.limit);
    if (p.before) q = q.where('id', '<', p.before);
    if (p.status) q = q.where('status', '=', p.status);
    return q.execute();
  }

  /** Starts a new retry round for a delivery; returns the attempt number the job will make. */
  async rearm(trx: Db, d: DeliveryRow, now: number): Promise<number> {
    await trx
      .updateTable('webhook_deliveries')
      .set({ status: 'pending', round_start: d.attempts, next_attempt_at: now, updated_at: now })
      .where('id', '=', d.id)
      .execute();
    return d.attempts + 1;
  }
}
