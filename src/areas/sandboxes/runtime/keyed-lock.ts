/** Runs `fn` after every earlier call with the same key has settled: one lifecycle change at a time. */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.catch(() => {}).then(fn);
    this.tails.set(key, next);
    try {
      return await next;
    } finally {
      if (this.tails.get(key) === next) this.tails.delete(key);
    }
  }

  /** Waits for everything in flight. */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.tails.values()]);
  }
}
