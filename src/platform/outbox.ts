// The event outbox (ARCHITECTURE.md: "the change and its event rows commit in one transaction; the bus
// only wakes the deliverer"). An area records its event inside the transaction that makes the change,
// so an acknowledged change always has its event: a crash after the commit leaves the row here, and
// the next drain (a wake-up, the sweep at start, the periodic sweep) hands it to the consumer.
//
// The consumer (the webhooks area) turns a batch of rows into its own durable work in the SAME
// transaction that deletes them, so each event is fanned out exactly once, also across replicas
// (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: one writer).
import type { Transaction } from 'kysely';
import type { Store } from '../store/db.js';
import { relaxCommit } from '../store/relaxed-commit.js';
import type { Tables } from '../store/schema.js';
import type { Bus } from './events.js';
import { newId } from './ids.js';

export { outboxMigrations } from './outbox-migration.js';

/** What an area emits: the spec's event name, the owner it belongs to, the object it reports. */
export interface OutboxEvent {
  event: string;
  ownerId: string;
  data: Record<string, unknown>;
}

/** An event as stored: `id` is time-ordered and unique, `timestamp` is when it was recorded. */
export interface RecordedEvent extends OutboxEvent {
  id: string;
  timestamp: string;
}

export type Trx = Transaction<Tables>;

export interface OutboxConsumer {
  /** Makes the events durable work of its own inside `trx`; the rows are deleted in the same commit. */
  handle(trx: Trx, events: RecordedEvent[]): Promise<void>;
  /** After that commit (e.g. wake the job poller). */
  committed?(): void;
}

/** Rows per drain transaction. */
const BATCH = 500;

type Log = { error(obj: Record<string, unknown>, msg?: string): void };

export interface OutboxOptions {
  store: Pick<Store, 'db' | 'dialect'>;
  bus: Bus;
  log: Log;
  /** Sweep for rows whose wake-up was lost (a crash between commit and wake). Default 2 s. */
  sweepMs?: number;
}

export class Outbox {
  private consumer: OutboxConsumer | undefined;
  private started = false;
  private running: Promise<void> | undefined;
  private again = false;
  private sweep: NodeJS.Timeout | undefined;
  private readonly unsubscribe: () => void;
  private readonly own = new Set<string>();

  constructor(private readonly o: OutboxOptions) {
    // An outbox event published by another replica means rows to drain (a no-op when this one does not).
    // Its own events already started a drain in wake().
    this.unsubscribe = o.bus.subscribe((e) => {
      if (e.id === undefined) return;
      if (this.own.delete(e.id)) return;
      if (this.started) this.drainSoon();
    });
  }

  /**
   * Records events inside the caller's transaction: they exist if and only if it commits. Pass what
   * it returns to `wake()` after the commit (or use `atomically`, which does both).
   */
  async record(trx: Trx, events: OutboxEvent | OutboxEvent[]): Promise<RecordedEvent[]> {
    const list = Array.isArray(events) ? events : [events];
    if (!list.length) return [];
    const now = Date.now();
    const timestamp = new Date(now).toISOString();
    const recorded = list.map((e) => ({ ...e, data: e.data ?? {}, id: newId('evt', now), timestamp }));
    await trx
      .insertInto('outbox_events')
      .values(
        recorded.map((e) => ({
          id: e.id,
          owner_id: e.ownerId,
          event: e.event,
          data: JSON.stringify(e.data),
          timestamp,
          created_at: now,
        })),
      )
      .execute();
    return recorded;
  }

  /**
   * Runs `fn` in one transaction of the metadata store; events passed to `emit` are recorded in it and
   * the deliverer is woken after the commit. The usual way to change something and report it.
   */
  async atomically<T>(fn: (trx: Trx, emit: (e: OutboxEvent) => void) => Promise<T>): Promise<T> {
    const out = await this.o.store.db.transaction().execute(async (trx) => {
      const pending: OutboxEvent[] = [];
      const result = await fn(trx, (e) => {
        pending.push(e);
      });
      return { result, recorded: await this.record(trx, pending) };
    });
    this.wake(out.recorded);
    return out.result;
  }

  /** An event that reports no write of nube's own (nothing to commit it with): recorded on its own. */
  async emit(e: OutboxEvent | OutboxEvent[]): Promise<void> {
    this.wake(await this.o.store.db.transaction().execute((trx) => this.record(trx, e)));
  }

  /**
   * After the commit that recorded `events`: tells live observers (SSE, tests) on the bus, which also
   * wakes the replicas that drain, and drains here when this replica does. Best effort: a lost wake-up
   * only delays delivery until the next sweep.
   */
  wake(events: RecordedEvent[]): void {
    if (!events.length) return;
    if (this.started) this.drainSoon();
    // Bounded: ids whose echo never comes back (Redis away) must not pile up.
    if (this.own.size > 10_000) this.own.clear();
    for (const e of events) {
      this.own.add(e.id);
      void this.o.bus.publish(e).catch(() => {});
    }
  }

  /** The one consumer of the outbox (the webhooks area). */
  consume(consumer: OutboxConsumer): void {
    this.consumer = consumer;
    if (this.started) this.drainSoon();
  }

  /** Starts draining: a sweep now (rows left by a crash) and every `sweepMs`. */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.sweep = setInterval(() => this.drainSoon(), this.o.sweepMs ?? 2000);
    this.sweep.unref();
    this.drainSoon();
  }

  async stop(): Promise<void> {
    this.started = false;
    if (this.sweep) clearInterval(this.sweep);
    this.unsubscribe();
    await this.running;
  }

  /** Drains until the outbox is empty (tests, and the loop below); returns the events handed over. */
  async drain(): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await this.drainBatch();
      total += n;
      if (n < BATCH) return total;
    }
  }

  /** Rows waiting (GET /metrics, tests). */
  async backlog(): Promise<number> {
    const r = await this.o.store.db
      .selectFrom('outbox_events')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  // One loop at a time per process; a wake-up during a drain makes it go round once more, so events
  // committed meanwhile share the next transaction instead of each paying for their own.
  private drainSoon(): void {
    if (!this.consumer) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        // One turn of the event loop first: commits finishing now (a tick of concurrent requests) join
        // this drain instead of each paying for a drain of its own.
        await new Promise<void>((resolve) => setImmediate(resolve));
        try {
          await this.drain();
        } catch (err) {
          // The rows stay; the sweep tries again.
          this.o.log.error({ err }, 'outbox drain failed; retrying at the next sweep');
          return;
        }
      } while (this.again && this.started);
    })().finally(() => {
      this.running = undefined;
    });
  }

  private async drainBatch(): Promise<number> {
    const consumer = this.consumer;
    if (!consumer) return 0;
    const done = await this.o.store.db.transaction().execute(async (trx) => {
      await relaxCommit(trx, this.o.store.dialect);
      let q = trx.selectFrom('outbox_events').selectAll().orderBy('id').limit(BATCH);
      // Replicas drain side by side: each takes rows no other transaction holds.
      if (this.o.store.dialect === 'postgres') q = q.forUpdate().skipLocked();
      const rows = await q.execute();
      if (!rows.length) return [];
      const events = rows.map((r) => ({
        id: r.id,
        event: r.event,
        ownerId: r.owner_id,
        timestamp: r.timestamp,
        data: JSON.parse(r.data) as Record<string, unknown>,
      }));
      await consumer.handle(trx, events);
      await trx
        .deleteFrom('outbox_events')
        .where(
          'id',
          'in',
          rows.map((r) => r.id),
        )
        .execute();
      return events;
    });
    if (done.length) consumer.committed?.();
    return done.length;
  }
}
