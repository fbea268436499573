// Test bodies of webhook deliveries through the API only, run by test/webhooks/outbox.test.ts (two
// replicas in process) and by test/nodes/processes.test.ts (three nube processes, a client spreading
// each request over them).
import { expect } from 'vitest';
import { json } from '../helpers/server.js';
import { until, verify } from './helpers.js';
import type { Receiver } from './receiver.js';

const bodies = (got: { raw: string }[]) => got.map((g) => JSON.parse(g.raw) as { event: string; data: { id: string } });

/** Every delivery of a webhook, all pages (`t.baseUrl` is read per request). */
export async function allDeliveries(t: { readonly baseUrl: string; ownerKey: string }, hookId: string): Promise<{ id: string; status: string; attemptCount: number }[]> {
  const all: { id: string; status: string; attemptCount: number }[] = [];
  let cursor = '';
  for (;;) {
    const r = await fetch(`${t.baseUrl}/api/v2/webhooks/${hookId}/deliveries?limit=100${cursor}`, { headers: { authorization: `Bearer ${t.ownerKey}` } });
    const page = await json(r);
    all.push(...page.items);
    if (!page.hasMore) return all;
    cursor = `&cursor=${encodeURIComponent(page.nextCursor)}`;
  }
}

/**
 * The events whose data ids are `ids` reach the receiver once each however many replicas drain the
 * outbox: one delivery row per event, all succeeded, each request signed with the hook's secret (when
 * given) under its own delivery id.
 */
export async function deliveredOncePerEvent(
  t: { readonly baseUrl: string; ownerKey: string },
  rx: Receiver,
  hook: { id: string; secret?: string },
  ids: string[],
): Promise<void> {
  await rx.waitFor(ids.length, 60_000);
  const rows = await until(() => allDeliveries(t, hook.id), (l) => l.length >= ids.length && l.every((d) => d.status === 'succeeded'), 60_000);
  expect(rows).toHaveLength(ids.length);
  expect(rows.every((d) => d.status === 'succeeded')).toBe(true);
  const got = bodies(rx.got).map((b) => b.data.id);
  expect(new Set(got)).toEqual(new Set(ids));
  expect(got).toHaveLength(ids.length);
  expect(new Set(rx.got.map((g) => g.headers['x-service-delivery'])).size).toBe(ids.length);
  if (hook.secret) for (const g of rx.got) expect(verify(hook.secret, g.raw, g.headers['x-service-signature'])).toBe(true);
}
