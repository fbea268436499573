/** A one-reader queue: the turn pushes, the HTTP response pulls; nothing blocks the turn. */
export class Channel<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  push(item: T) {
    this.items.push(item);
    this.wake?.();
  }
  end() {
    this.ended = true;
    this.wake?.();
  }
  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      while (this.items.length) yield this.items.shift()!;
      if (this.ended) return;
      await new Promise<void>((r) => {
        this.wake = r;
      });
      this.wake = null;
    }
  }
}

