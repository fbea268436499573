// Durable delivery: a bus event becomes one row per subscribed webhook plus one job per row (same
// transaction), and each job makes one attempt, records it and, on failure, enqueues the next attempt
// per the retry schedule, also in one transaction. The queue is at-least-once, so a job carries the
// attempt number it makes and does nothing if that attempt is already recorded.
import { createHash } from 'node:crypto';
import type { BusEvent } from '../../platform/events.js';
import type { JobContext, JobQueue } from '../../platform/jobs.js';
import type { DeliveriesRepo } from './delivery-repo.js';
import { EVENT_NAMES } from './events.js';
import type { DeliveryRow, WebhooksRepo } from './repo.js';
import type { WebhookSender } from './sender.js';

export const DELIVER_JOB = 'webhooks.deliver';
/** Spec: 5 consecutive failures (non-2xx or timeout) pause the webhook. */
export const PAUSE_AFTER = 5;

export interface DeliverJob {
  deliveryId: string;
  attempt: number;
}

type Log = { warn(obj: Record<string, unknown>, msg?: string): void };

export interface DeliveryDeps {
  hooks: WebhooksRepo;
  deliveries: DeliveriesRepo;
  jobs: JobQueue;
  sender: WebhookSender;
  openSecret(sealed: string): string;
  /** Waits before retry 1, 2, ... */
  retryMs: readonly number[];
  log: Log;
}

const KNOWN = new Set<string>(EVENT_NAMES);

/**
 * Delivery ids are derived from (webhook, event, timestamp, body): with the Redis bus every replica
 * receives every event, and the one whose insert wins is the one that enqueues. The time prefix keeps
 * ids sortable by event time for pagination.
 */
function deliveryId(webhookId: string, at: number, body: string): string {
  const h = createHash('sha256').update(webhookId).update('\n').update(body).digest('hex').slice(0, 16);
  return `dlv_${at.toString(36).padStart(9, '0')}${h}`;
}

export class Deliverer {
  constructor(private readonly d: DeliveryDeps) {}

  /** Bus subscriber: records a delivery for every webhook of the owner subscribed to the event. */
  async fanOut(e: BusEvent): Promise<void> {
    if (!KNOWN.has(e.event) || !e.ownerId) return;
    const subs = (await this.d.hooks.subscriptions(e.ownerId)).filter((s) =>
      (JSON.parse(s.events) as string[]).includes(e.event),
    );
    if (!subs.length) return;
    const parsed = Date.parse(e.timestamp);
    const at = Number.isNaN(parsed) ? Date.now() : parsed;
    const body = JSON.stringify({ event: e.event, timestamp: e.timestamp, data: e.data ?? {} });
    const now = Date.now();
    await this.d.hooks.db.transaction().execute(async (trx) => {
      const rows: DeliveryRow[] = subs.map((s) => {
        const active = s.status === 'ACTIVE';
        return {
          id: deliveryId(s.id, at, body),
          webhook_id: s.id,
          owner_id: e.ownerId,
          event: e.event,
          body,
          // Events while PAUSED are kept as skipped deliveries: visible, and redeliverable by hand.
          status: active ? 'pending' : 'skipped',
          attempts: 0,
          round_start: 0,
          next_attempt_at: active ? now : null,
          last_status_code: null,
          last_error: active ? null : 'webhook paused',
          log: '[]',
          created_at: now,
          updated_at: now,
        };
      });
      const fresh = await this.d.deliveries.insertNew(trx, rows);
      for (const r of rows) {
        if (r.status !== 'pending' || !fresh.has(r.id)) continue;
        await this.enqueue(trx, r.id, 1, now);
      }
    });
  }

  enqueue(db: DeliveriesRepo['db'], deliveryId: string, attempt: number, runAt: number): Promise<string> {
    const job: DeliverJob = { deliveryId, attempt };
    // Keyed by delivery: a redelivery re-arms a waiting retry instead of adding a second one.
    return this.d.jobs.enqueue(DELIVER_JOB, job, { db, runAt, key: deliveryId, onDuplicate: 'replace' });
  }

  /** Job handler: one attempt. HTTP failures are recorded and rescheduled here, never thrown. */
  readonly attempt = async (job: DeliverJob, ctx: JobContext<DeliverJob>): Promise<void> => {
    const t = await this.d.deliveries.target(job.deliveryId);
    if (t?.status !== 'pending' || t.attempts >= job.attempt) return;
    if (t.webhook_status !== 'ACTIVE') {
      await this.d.deliveries.markSkipped(t.id, 'webhook paused', Date.now());
      return;
    }
    const at = Date.now();
    const r = await this.d.sender.send({
      url: t.url,
      body: t.body,
      secret: this.d.openSecret(t.secret),
      deliveryId: t.id,
      event: t.event,
      attempt: job.attempt,
      signal: ctx.signal,
    });
    // The queue is stopping or lost the lease: leave the attempt unrecorded so it runs again.
    if (ctx.signal.aborted) throw new Error('delivery attempt interrupted');
    const ok = r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300;
    const retryInMs = this.d.retryMs[job.attempt - t.round_start - 1];
    await this.d.hooks.db.transaction().execute(async (trx) => {
      const rec = await this.d.deliveries.recordAttempt(
        trx,
        t,
        { ok, retryInMs, record: { attempt: job.attempt, at, ...r } },
        PAUSE_AFTER,
      );
      if (rec?.status === 'pending') {
        await this.enqueue(trx, t.id, job.attempt + 1, Math.round(at + r.durationMs + (retryInMs ?? 0)));
      }
      if (rec?.paused && !ok) {
        this.d.log.warn({ webhook: t.webhook_id, delivery: t.id }, 'webhook paused after consecutive failures');
      }
    });
  };
}
