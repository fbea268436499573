import { createHmac, timingSafeEqual } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

// Short retries so a whole schedule runs in a test; 8 attempts at most per round. The per-attempt timeout
// stays generous: at 400 ms, a loaded machine made a receiver's prompt answer time out, which added an
// attempt where a test counted them (the test of timeouts starts its own nube with a short one).
export const FAST = {
  NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
  NUBE_WEBHOOK_RETRY_SCHEDULE: '150ms,150ms,150ms,150ms,150ms,150ms,150ms',
  NUBE_WEBHOOK_TIMEOUT_MS: '10000',
};

/** The receiver's own check, written from the spec and not from nube's code. */
export function verify(secret: string, raw: string, header: string | string[] | undefined): boolean {
  const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(raw, 'utf8').digest('hex')}`);
  const given = Buffer.from(String(header ?? ''));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Polls `fn` until `ok` holds or `ms` pass (generous: it returns as soon as `ok` holds); returns the last value. */
export async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await sleep(50);
  }
}
