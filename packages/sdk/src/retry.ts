import { type NubeError, RateLimitError, ServiceUnavailableError } from './errors.js';

/** Methods whose repetition has the effect of one call: only these are retried. POST may create twice. */
export const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);

/** The longest Retry-After the SDK waits out by itself; a longer one is the caller's decision. */
export const MAX_RETRY_AFTER_MS = 60_000;
const BASE_DELAY_MS = 500;
const MAX_BACKOFF_MS = 8_000;

/**
 * 503s that say the server lacks something only its operator can add (an upstream, a search provider,
 * a host that can run sandboxes): asking again in a second gets the same answer.
 */
const LASTING_503 = /NotConfigured$|^HostUnsupported$/;

/**
 * How long to wait before retrying after `err` (attempt 0 is the first retry), or undefined when it is not
 * worth retrying: only 429 and 503. Retry-After is honoured as the server gave it; without one the wait
 * doubles from 0.5 s up to 8 s, half of it random so that many clients do not come back at once.
 */
export function retryDelayMs(
  err: NubeError,
  attempt: number,
  random: () => number = Math.random,
): number | undefined {
  if (!(err instanceof RateLimitError || err instanceof ServiceUnavailableError)) return undefined;
  if (err instanceof ServiceUnavailableError && err.code && LASTING_503.test(err.code)) return undefined;
  if (err.retryAfter !== undefined) {
    const ms = err.retryAfter * 1000;
    return ms <= MAX_RETRY_AFTER_MS ? ms : undefined;
  }
  const cap = Math.min(MAX_BACKOFF_MS, BASE_DELAY_MS * 2 ** attempt);
  return cap / 2 + random() * (cap / 2);
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
