import { TEST_REDIS_URL } from '../helpers/redis.js';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { type BusEvent, RedisBus } from '../../src/platform/events.js';
import { FlexibleRateLimiter } from '../../src/platform/limits.js';
import { randomToken } from '../../src/platform/ids.js';

const REDIS_URL = TEST_REDIS_URL;
const clients: Redis[] = [];
const client = () => {
  const c = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  clients.push(c);
  return c;
};
afterAll(() => {
  for (const c of clients) c.disconnect();
});

describe('scale-out parts on Redis', () => {
  it('rate limits are shared by every replica', async () => {
    const a = new FlexibleRateLimiter(client());
    const b = new FlexibleRateLimiter(client());
    const key = `owner-${randomToken(8)}:sandboxes.create`;
    const rule = { points: 10, windowSeconds: 60 };
    const results = [];
    for (let i = 0; i < 12; i++) results.push(await (i % 2 ? a : b).consume(key, rule));
    expect(results.filter((r) => r.allowed)).toHaveLength(10);
    const denied = results.at(-1)!;
    expect(denied.allowed).toBe(false);
    if (!denied.allowed) expect(denied.retryAfterSec).toBeGreaterThan(0);
  });

  it('events published on one replica reach subscribers on another', async () => {
    const one = new RedisBus(client(), client());
    const two = new RedisBus(client(), client());
    await new Promise((r) => setTimeout(r, 200)); // subscriptions established
    const got = new Promise<BusEvent>((resolve) => two.subscribe(resolve));
    await one.publish({ event: 'file.created', ownerId: 'acct_1', data: { id: 'f1' } });
    const e = await got;
    expect(e).toMatchObject({ event: 'file.created', ownerId: 'acct_1', data: { id: 'f1' } });
    expect(Date.parse(e.timestamp)).toBeGreaterThan(0);
    await one.close();
    await two.close();
  });
});
