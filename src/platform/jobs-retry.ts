// Retry policy of the job queue: how long to wait after a failed attempt, and how to refuse retries.

/** Thrown by a handler to fail the job without retrying. */
export class PermanentJobError extends Error {
  constructor(message = 'permanent job failure', options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentJobError';
  }
}

/**
 * Exponential backoff with "equal jitter": 1 s, 2 s, 4 s, ... doubled per attempt, capped at 1 h, and
 * the wait is drawn from [d/2, d] so workers that failed together do not retry in lockstep.
 */
export function defaultBackoff(attempt: number): number {
  const d = Math.min(3_600_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(d / 2 + Math.random() * (d / 2));
}
