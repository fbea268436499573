// Refusals of credentials that name no account (unknown or malformed keys) cost nothing to send, and each
// was an audit write: a flood of them was a flood of writes into the log and its store. They are bounded
// here, before anything is looked up or written: per source address and window, the first few are entries
// of their own, and the rest are counted and written as one entry (`repeats`) when the window ends.
// Past a number of addresses in a window, new addresses share one count (source address null), so memory
// and writes stay bounded whatever the addresses. The record that refusals happened is never dropped: an
// address's first refusal is always written at once, and every later one is in a count.
import { newId } from '../../platform/ids.js';
import type { AuditRecord } from './chain.js';

/** Entries of their own per address and window. */
export const REFUSALS_PER_ADDRESS = 5;
/** Addresses tracked per window; refusals from further ones go into one shared count. */
export const REFUSAL_ADDRESSES = 1000;
const SHARED = '';

interface Bucket {
  written: number;
  more: number;
  /** The last refusal counted, which the summary entry shows. */
  last?: AuditRecord;
}

export class RefusalAggregator {
  private windowStart = 0;
  private readonly buckets = new Map<string, Bucket>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly write: (entry: AuditRecord) => Promise<void>,
    private readonly windowMs: number,
    private readonly onError: (err: unknown) => void,
  ) {
    // Counts are written when their window ends even if no refusal comes after it.
    this.timer = setInterval(() => this.roll(Date.now()), windowMs);
    this.timer.unref();
  }

  /** Whether this account-less refusal is written now as its own entry; false: it is counted. */
  admit(e: AuditRecord): boolean {
    this.roll(e.created_at);
    let address = e.source_ip ?? SHARED;
    let b = this.buckets.get(address);
    if (!b && this.buckets.size >= REFUSAL_ADDRESSES) {
      address = SHARED;
      b = this.buckets.get(SHARED);
    }
    if (!b) {
      b = { written: 0, more: 0 };
      this.buckets.set(address, b);
    }
    if (address !== SHARED && b.written < REFUSALS_PER_ADDRESS) {
      b.written++;
      return true;
    }
    b.more++;
    b.last = address === SHARED ? { ...e, source_ip: null } : e;
    return false;
  }

  private roll(now: number): void {
    if (now - this.windowStart < this.windowMs) return;
    this.windowStart = now;
    this.flush(now).catch(this.onError);
  }

  /** Writes the counts of the window so far (at its end, and when nube closes). */
  async flush(now = Date.now()): Promise<void> {
    const counted = [...this.buckets.values()].filter((b) => b.more > 0 && b.last);
    this.buckets.clear();
    await Promise.all(
      counted.map((b) => this.write({ ...b.last!, id: newId('aud', now), created_at: now, repeats: b.more })),
    );
  }

  close(): Promise<void> {
    clearInterval(this.timer);
    return this.flush();
  }
}
