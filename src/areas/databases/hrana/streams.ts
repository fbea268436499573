import { ApiError } from '../../../platform/errors.js';
import { BASE62, randomToken } from '../../../platform/ids.js';

/** A libSQL stream that outlives one HTTP request: its baton, stored SQL and idle clock. */
export interface HranaStream {
  /** Stable id (the engine keys the stream's connection with it); never shown to clients. */
  readonly id: string;
  readonly ownerId: string;
  readonly dbId: string;
  /** `store_sql` texts by id, for this stream only. */
  readonly sqls: Map<number, string>;
  /** The stream's connection exists in an executor (it ran at least once). */
  ran: boolean;
  baton: string | null;
  timer: NodeJS.Timeout | null;
}

/**
 * Open streams by baton. A baton is good for one request: each answer carries a fresh one, so a
 * replayed or concurrent request with an old baton fails instead of racing on the connection. A
 * stream left alone for `idleMs` is closed (`onExpire` closes its connection, rolling back its
 * transaction); its baton then answers STREAM_EXPIRED, as libSQL's server does.
 */
export class HranaStreams {
  private readonly byBaton = new Map<string, HranaStream>();
  /** Batons of streams that expired (or were closed for a failure) recently, to say why they fail. */
  private readonly expired = new Map<string, number>();
  private readonly perOwner = new Map<string, number>();

  constructor(
    private readonly idleMs: number,
    private readonly maxPerOwner: number,
    private readonly onExpire: (s: HranaStream) => void,
  ) {}

  get size(): number {
    return this.byBaton.size;
  }

  open(ownerId: string, dbId: string): HranaStream {
    const n = this.perOwner.get(ownerId) ?? 0;
    if (n >= this.maxPerOwner) {
      throw new ApiError(
        429,
        'STREAM_LIMIT',
        `${this.maxPerOwner} libSQL streams (open transactions) of this account are already open; commit or roll back one first`,
        { retryAfter: 1 },
        { 'retry-after': '1' },
      );
    }
    this.perOwner.set(ownerId, n + 1);
    return { id: randomToken(16, BASE62), ownerId, dbId, sqls: new Map(), ran: false, baton: null, timer: null };
  }

  /** The stream of `baton`, taken off the idle clock for the request. Another owner's is "not found". */
  take(baton: string, ownerId: string, dbId: string): HranaStream {
    const s = this.byBaton.get(baton);
    if (!s || s.ownerId !== ownerId || s.dbId !== dbId) {
      if (this.expired.has(baton)) {
        throw new ApiError(400, 'STREAM_EXPIRED', 'the stream has expired (idle too long) and its transaction was rolled back');
      }
      throw new ApiError(400, 'STREAM_NOT_FOUND', 'no open stream has this baton (it was used already, or the stream is closed)');
    }
    this.byBaton.delete(baton);
    if (s.timer) clearTimeout(s.timer);
    s.timer = null;
    s.baton = null;
    return s;
  }

  /** Back to idle with a fresh baton, which the answer carries. */
  park(s: HranaStream): string {
    const baton = `hb_${randomToken(32, BASE62)}`;
    s.baton = baton;
    this.byBaton.set(baton, s);
    s.timer = setTimeout(() => this.expire(s), this.idleMs);
    s.timer.unref();
    return baton;
  }

  /** The stream is over (closed by the client, or failed): it no longer counts against its owner. */
  drop(s: HranaStream): void {
    if (s.timer) clearTimeout(s.timer);
    s.timer = null;
    if (s.baton) this.byBaton.delete(s.baton);
    s.baton = null;
    const n = (this.perOwner.get(s.ownerId) ?? 1) - 1;
    if (n <= 0) this.perOwner.delete(s.ownerId);
    else this.perOwner.set(s.ownerId, n);
  }

  private expire(s: HranaStream): void {
    if (s.baton === null) return;
    const baton = s.baton;
    this.drop(s);
    this.expired.set(baton, Date.now());
    // Remember expired batons for a while (bounded), so their use says "expired", not "unknown".
    if (this.expired.size > 10_000) this.expired.delete(this.expired.keys().next().value as string);
    this.onExpire(s);
  }
}
