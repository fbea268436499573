// Durable delivery: bus events become one row per subscribed webhook plus jobs (same transaction); a
// job makes one attempt for each delivery it names, records each and, on failure, enqueues that
// delivery's next attempt per the retry schedule, also in one transaction. First attempts of a batch of
// events share a job per webhook (a job claim costs about 1 ms of store time, more than a POST);
// retries and redeliveries get a job each, keyed by delivery. The queue is at-least-once, so a job
// names the attempt number it makes and skips a delivery whose attempt is already recorded.
import { DEFAULT_WORKSPACE } from '../../platform/workspaces.js';
import { createHash } from 'node:crypto';
import type { BusEvent } from '../../platform/events.js';
import type { JobContext, JobQueue } from '../../platform/jobs.js';
import type { Dialect } from '../../store/db.js';
import { relaxCommit } from '../../store/relaxed-commit.js';
import type { RecordedEvent } from '../../platform/outbox.js';
import type { AttemptOutcome, DeliveriesRepo, DeliveryTarget } from './delivery-repo.js';
import { EVENT_NAMES } from './events.js';
import { GroupCommit } from './group-commit.js';
import type { DeliveryRow, WebhooksRepo } from './repo.js';
import type { WebhookSender } from './sender.js';

export const DELIVER_JOB = 'webhooks.deliver';
/** Spec: 5 consecutive failures (non-2xx or timeout) pause the webhook. */
export const PAUSE_AFTER = 5;

export interface DeliverJob {
  deliveries: { id: string; attempt: number }[];
}

/** Deliveries of one job in flight at once; the job type's concurrency multiplies it. */
const PER_JOB = 16;
/** First attempts grouped into one job at most. */
const JOB_BATCH = 64;
/** First attempts run inline at once at most (as many as the delivery jobs' slots run); beyond, jobs. */
const INLINE_MAX = 256;

type Log = { warn(obj: Record<string, unknown>, msg?: string): void };

export interface DeliveryDeps {
  hooks: WebhooksRepo;
  deliveries: DeliveriesRepo;
  jobs: JobQueue;
  sender: WebhookSender;
  dialect: Dialect;
  /** When the job behind an inline first attempt runs if the attempt was not recorded (process died). */
  fallbackMs: number;
  openSecret(sealed: string): string;
  /** Waits before retry 1, 2, ... */
  retryMs: readonly number[];
  log: Log;
}

const KNOWN = new Set<string>(EVENT_NAMES);

/**
 * Delivery ids are derived from the webhook and the event (its outbox id; for events still published
 * on the bus, its timestamp and body: with the Redis bus every replica receives every event, and the
 * one whose insert wins is the one that enqueues). The time prefix keeps ids sortable by event time.
 */
function deliveryId(webhookId: string, at: number, event: string): string {
  const h = createHash('sha256').update(webhookId).update('\n').update(event).digest('hex').slice(0, 16);
  return `dlv_${at.toString(36).padStart(9, '0')}${h}`;
}

interface Recorded {
  t: DeliveryTarget;
  outcome: AttemptOutcome;
}

type Db = DeliveriesRepo['db'];

export class Deliverer {
  private readonly events = new GroupCommit<BusEvent>((batch) => this.writeFanOut(batch));
  private readonly records = new GroupCommit<Recorded>((batch) => this.writeRecords(batch));
  /** First attempts of the outbox batch being committed, and how many inline attempts are under way. */
  private inlineNext: { key: string; ids: string[] }[] = [];
  private inlineCount = 0;
  private dueNow = false;
  private readonly inline = new Set<Promise<void>>();
  private readonly stopping = new AbortController();

  constructor(private readonly d: DeliveryDeps) {}

  /** Bus subscriber: records a delivery for every webhook of the owner subscribed to the event. */
  fanOut(e: BusEvent): Promise<void> {
    // An event with an id came from the outbox and already has its deliveries.
    if (e.id !== undefined || !KNOWN.has(e.event) || !e.ownerId) return Promise.resolve();
    return this.events.submit(e);
  }

  /**
   * Outbox consumer: the deliveries (and their first jobs) of a batch of recorded events, written in
   * the transaction that removes the events from the outbox. Ids derive from the event's own id, so a
   * batch handled twice (never expected; the outbox deletes in the same commit) inserts nothing twice.
   */
  async fanOutRecorded(trx: Db, batch: RecordedEvent[]): Promise<void> {
    this.releaseInline(); // a batch whose commit failed never started
    const known = batch.filter((e) => KNOWN.has(e.event) && e.ownerId);
    const rows = await this.deliveryRows(trx, known, (hookId, e, at) => deliveryId(hookId, at, e.id));
    await this.insertAndEnqueue(trx, rows, true);
  }

  /**
   * Outbox commit done: first attempts run here at once instead of waiting for a job claim (several
   * store round trips and a poll). Their jobs wait `fallbackMs` as the durable fallback: cancelled once
   * the attempts are recorded, run if this process died first.
   */
  committed(): void {
    const groups = this.inlineNext;
    this.inlineNext = [];
    for (const g of groups) {
      const run = this.runInline(g)
        .catch((err: unknown) => this.d.log.warn({ err }, 'inline webhook delivery failed; its job will retry'))
        .finally(() => this.inline.delete(run));
      this.inline.add(run);
    }
    // Inline attempts' jobs are not due yet; a poll is only worth it for jobs that are.
    if (this.dueNow) this.d.jobs.notify();
    this.dueNow = false;
  }

  private async runInline(g: { key: string; ids: string[] }): Promise<void> {
    try {
      const targets = await this.d.deliveries.targets(g.ids);
      await this.deliverAll(targets, () => 1, this.stopping.signal);
      if (!this.stopping.signal.aborted) await this.d.jobs.cancel({ key: g.key });
    } finally {
      this.inlineCount -= g.ids.length;
    }
  }

  private releaseInline(): void {
    for (const g of this.inlineNext) this.inlineCount -= g.ids.length;
    this.inlineNext = [];
  }

  /** Stops inline attempts and waits for them (unrecorded ones are left to their fallback jobs). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await Promise.all(this.inline);
  }

  private async writeFanOut(batch: BusEvent[]): Promise<void> {
    const rows = await this.deliveryRows(this.d.hooks.db, batch, (hookId, _e, at, body) => deliveryId(hookId, at, body));
    if (!rows.length) return;
    await this.d.hooks.db.transaction().execute((trx) => this.insertAndEnqueue(trx, rows));
    this.d.jobs.notify();
  }

  private async deliveryRows<E extends BusEvent>(
    db: Db,
    batch: E[],
    idOf: (hookId: string, e: E, at: number, body: string) => string,
  ): Promise<DeliveryRow[]> {
    const subsOf = new Map<string, Awaited<ReturnType<WebhooksRepo['subscriptions']>>>();
    const rows: DeliveryRow[] = [];
    const now = Date.now();
    for (const e of batch) {
      let subs = subsOf.get(e.ownerId);
      if (!subs) {
        subs = await this.d.hooks.subscriptions(e.ownerId, db);
        subsOf.set(e.ownerId, subs);
      }
      const parsed = Date.parse(e.timestamp);
      const at = Number.isNaN(parsed) ? now : parsed;
      const body = JSON.stringify({ event: e.event, timestamp: e.timestamp, data: e.data ?? {} });
      for (const s of subs) {
        if (!(JSON.parse(s.events) as string[]).includes(e.event)) continue;
        if (!inWorkspace(s.workspace_id, e)) continue;
        const active = s.status === 'ACTIVE';
        rows.push({
          id: idOf(s.id, e, at, body),
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
        });
      }
    }
    return rows;
  }

  private async insertAndEnqueue(trx: Db, rows: DeliveryRow[], inline = false): Promise<void> {
    if (!rows.length) return;
    const now = Date.now();
    const fresh = await this.d.deliveries.insertNew(trx, rows);
    const byHook = new Map<string, string[]>();
    for (const r of rows) {
      if (r.status !== 'pending' || !fresh.has(r.id)) continue;
      const ids = byHook.get(r.webhook_id) ?? [];
      ids.push(r.id);
      byHook.set(r.webhook_id, ids);
    }
    for (const ids of byHook.values()) {
      for (let i = 0; i < ids.length; i += JOB_BATCH) {
        const some = ids.slice(i, i + JOB_BATCH);
        const job: DeliverJob = { deliveries: some.map((id) => ({ id, attempt: 1 })) };
        if (inline && this.inlineCount + some.length <= INLINE_MAX && !this.stopping.signal.aborted) {
          const key = `${DELIVER_JOB}:first:${some[0]}`;
          this.inlineCount += some.length;
          this.inlineNext.push({ key, ids: some });
          await this.d.jobs.enqueue(DELIVER_JOB, job, { db: trx, runAt: now + this.d.fallbackMs, key });
        } else {
          this.dueNow = true;
          await this.d.jobs.enqueue(DELIVER_JOB, job, { db: trx, runAt: now });
        }
      }
    }
  }

  /** Wakes the job poller after a commit that enqueued deliveries inside a transaction. */
  notify(): void {
    this.d.jobs.notify();
  }

  enqueue(db: Db, deliveryId: string, attempt: number, runAt: number): Promise<string> {
    const job: DeliverJob = { deliveries: [{ id: deliveryId, attempt }] };
    // Keyed by delivery: a redelivery re-arms a waiting retry instead of adding a second one.
    return this.d.jobs.enqueue(DELIVER_JOB, job, { db, runAt, key: deliveryId, onDuplicate: 'replace' });
  }

  /** Job handler. HTTP failures are recorded and rescheduled per delivery, never thrown. */
  readonly run = async (job: DeliverJob, ctx: JobContext<DeliverJob>): Promise<void> => {
    const wanted = new Map(job.deliveries.map((x) => [x.id, x.attempt]));
    const targets = await this.d.deliveries.targets([...wanted.keys()]);
    await this.deliverAll(targets, (id) => wanted.get(id) ?? 1, ctx.signal);
    // The queue is stopping or lost the lease: unrecorded attempts run again with the job.
    if (ctx.signal.aborted) throw new Error('delivery job interrupted');
  };

  private async deliverAll(targets: DeliveryTarget[], attemptOf: (id: string) => number, signal: AbortSignal): Promise<void> {
    let next = 0;
    const lane = async () => {
      while (next < targets.length && !signal.aborted) {
        const t = targets[next++]!;
        await this.attempt(t, attemptOf(t.id), signal);
      }
    };
    await Promise.all(Array.from({ length: Math.min(PER_JOB, targets.length) }, lane));
  }

  private async attempt(t: DeliveryTarget, attempt: number, signal: AbortSignal): Promise<void> {
    if (t.status !== 'pending' || t.attempts >= attempt) return;
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
      attempt,
      signal,
    });
    // Interrupted by the queue stopping: leave the attempt unrecorded so it runs again.
    if (signal.aborted) return;
    const ok = r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300;
    const retryInMs = this.d.retryMs[attempt - t.round_start - 1];
    await this.records.submit({ t, outcome: { ok, retryInMs, record: { attempt, at, ...r } } });
  }

  /** Records attempts (in the order they finished, which the consecutive-failure count follows). */
  private async writeRecords(batch: Recorded[]): Promise<void> {
    // Webhooks with only successes in the batch (the usual case) take the batched path; a webhook with
    // any failure keeps the per-attempt path, whose order the consecutive-failure count follows.
    const failing = new Set(batch.filter((r) => !r.outcome.ok).map((r) => r.t.webhook_id));
    const quick = batch.filter((r) => !failing.has(r.t.webhook_id));
    const slow = batch.filter((r) => failing.has(r.t.webhook_id));
    await this.d.hooks.db.transaction().execute(async (trx) => {
      // An attempt record lost with the database server means the attempt is made again (at least once).
      await relaxCommit(trx, this.d.dialect);
      await this.d.deliveries.recordSuccesses(
        trx,
        this.d.dialect,
        quick.map((r) => ({ d: r.t, record: r.outcome.record })),
      );
      for (const { t, outcome } of slow) {
        const rec = await this.d.deliveries.recordAttempt(trx, t, outcome, PAUSE_AFTER);
        const { at, durationMs, attempt } = outcome.record;
        if (rec?.status === 'pending') {
          await this.enqueue(trx, t.id, attempt + 1, Math.round(at + durationMs + (outcome.retryInMs ?? 0)));
        }
        if (rec?.paused && !outcome.ok) {
          this.d.log.warn({ webhook: t.webhook_id, delivery: t.id }, 'webhook paused after consecutive failures');
        }
      }
    });
    // A poll costs several statements (about 9 ms on SQLite here): only retries can have become due.
    if (slow.length) this.d.jobs.notify();
  }
}

/**
 * A webhook of the default workspace hears every event of its account (as before workspaces); one of
 * another workspace only events about that workspace's resources (their `workspaceId`) or about the
 * workspace itself, so a workspace-scoped key's webhook learns nothing of other workspaces.
 */
function inWorkspace(workspaceId: string, e: { event: string; data?: Record<string, unknown> }): boolean {
  if (workspaceId === DEFAULT_WORKSPACE) return true;
  const d = e.data ?? {};
  if (e.event.startsWith('workspace.')) return d.id === workspaceId;
  return d.workspaceId === workspaceId;
}
