/**
 * Who may take the next free executor. Each owner (the account a request is for) has its own
 * queue of runnable jobs and holds at most `share` executors at once; when an executor frees up,
 * the owner holding the fewest executors goes first, and among equals the one served longest ago.
 * So one owner's backlog never stands in front of another owner's request, and one owner cannot
 * fill the pool. The counts are what the pool asks and the limits it enforces (docs/decisions.md,
 * "Databases: fair executor pool").
 */
export interface OwnerSlot<J> {
  readonly id: string;
  /** Executors running this owner's requests now. */
  running: number;
  /** Requests of this owner not yet handed to an executor (runnable, or behind their database's lane). */
  queued: number;
  /** Jobs that may start as soon as an executor is free for them, in arrival order. */
  readonly runnable: J[];
  /** Tick of the last time this owner got an executor. */
  served: number;
}

export class FairShare<J> {
  private readonly owners = new Map<string, OwnerSlot<J>>();
  private tick = 0;
  /** Runnable jobs over all owners. */
  runnableCount = 0;
  /** Queued requests over all owners (`nube_database_requests_queued`). */
  queuedCount = 0;

  constructor(
    /** Executors one owner may hold at once. */
    readonly share: number,
    /** Requests one owner may have waiting for an executor; more are refused (QueueFull). */
    readonly maxQueued: number,
  ) {}

  slot(id: string): OwnerSlot<J> {
    let o = this.owners.get(id);
    if (!o) {
      o = { id, running: 0, queued: 0, runnable: [], served: 0 };
      this.owners.set(id, o);
    }
    return o;
  }

  /** Owners with a runnable job that may take one more executor, the fairest first. */
  candidates(): OwnerSlot<J>[] {
    const out: OwnerSlot<J>[] = [];
    for (const o of this.owners.values()) if (o.runnable.length > 0 && o.running < this.share) out.push(o);
    if (out.length > 1) out.sort((a, b) => a.running - b.running || a.served - b.served);
    return out;
  }

  /** Every owner with something running or waiting. */
  slots(): IterableIterator<OwnerSlot<J>> {
    return this.owners.values();
  }

  /** Whether `id` holds all the executors it may. */
  atShare(id: string): boolean {
    return (this.owners.get(id)?.running ?? 0) >= this.share;
  }

  /** Whether one more request of `id` may wait for an executor. */
  canQueue(id: string): boolean {
    return (this.owners.get(id)?.queued ?? 0) < this.maxQueued;
  }

  enqueue(id: string): void {
    this.slot(id).queued++;
    this.queuedCount++;
  }

  dequeue(id: string): void {
    const o = this.slot(id);
    o.queued--;
    this.queuedCount--;
    this.forget(o);
  }

  pushRunnable(id: string, job: J): void {
    this.slot(id).runnable.push(job);
    this.runnableCount++;
  }

  takeRunnable(o: OwnerSlot<J>, i: number): J {
    this.runnableCount--;
    return o.runnable.splice(i, 1)[0] as J;
  }

  acquire(id: string): void {
    const o = this.slot(id);
    o.running++;
    o.served = ++this.tick;
  }

  release(id: string): void {
    const o = this.slot(id);
    o.running--;
    this.forget(o);
  }

  /** Every runnable job, removed (the pool is closing). */
  drain(): J[] {
    const all = [...this.owners.values()].flatMap((o) => o.runnable.splice(0));
    this.runnableCount = 0;
    return all;
  }

  /** An owner with nothing running or waiting takes no memory (owners come and go). */
  private forget(o: OwnerSlot<J>): void {
    if (o.running === 0 && o.queued === 0 && o.runnable.length === 0) this.owners.delete(o.id);
  }
}
