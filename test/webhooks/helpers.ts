import { createHmac, timingSafeEqual } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

// Short retries and timeout so a whole schedule runs in a test; 8 attempts at most per round.
export const FAST = {
  NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
  NUBE_WEBHOOK_RETRY_SCHEDULE: '150ms,150ms,150ms,150ms,150ms,150ms,150ms',
  NUBE_WEBHOOK_TIMEOUT_MS: '400',
};

/** The receiver's own check, written from the spec and not from nube's code. */
export function verify(secret: string, raw: string, header: string | string[] | undefined): boolean {
  const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(raw, 'utf8').digest('hex')}`);
  const given = Buffer.from(String(header ?? ''));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Polls `fn` until `ok` holds or `ms` pass; returns the last value (the caller asserts on it). */
export async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 8000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await sleep(50);
  }
}
