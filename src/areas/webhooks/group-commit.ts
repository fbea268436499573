// Group commit: the metadata store pays one fsync per transaction (about 5 ms on this host's disk with
// SQLite synchronous=FULL), so writing each event or attempt in its own transaction caps deliveries at
// ~200/s. Items submitted while a transaction is in flight are written together in the next one: no
// added latency when idle, one commit for many items under load. Each submitter still waits for the
// commit holding its item, so durability per item is unchanged.
// (There is no timer: a batch is whatever arrived while the previous commit ran, plus one tick.)

interface Pending<T> {
  item: T;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class GroupCommit<T> {
  private queue: Pending<T>[] = [];
  private running = false;

  constructor(
    private readonly write: (items: T[]) => Promise<void>,
    private readonly maxBatch = 256,
  ) {}

  submit(item: T): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length) {
        // SQLite commits block the event loop; yielding once lets the I/O that completed meanwhile
        // (receivers' answers) submit its items, so they share the next commit instead of queueing.
        await new Promise<void>((resolve) => setImmediate(resolve));
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          await this.write(batch.map((p) => p.item));
          for (const p of batch) p.resolve();
        } catch (err) {
          if (batch.length === 1) {
            batch[0]?.reject(err);
            continue;
          }
          // One bad item must not fail the others: retry them one by one.
          for (const p of batch) await this.write([p.item]).then(p.resolve, p.reject);
        }
      }
    } finally {
      this.running = false;
    }
  }
}
