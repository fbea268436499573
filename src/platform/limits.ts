import type { Redis } from 'ioredis';
import { type RateLimiterAbstract, RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { PlanName } from '../config.js';
import { errors } from './errors.js';
import type { RateLimitRule } from './operation.js';
import { type CountedAllowance, PLANS } from './plans.js';

/** Consumes one request for `key` under `rule`; returns seconds to wait when over the limit. */
export interface RateLimiter {
  consume(key: string, rule: RateLimitRule): Promise<{ allowed: true } | { allowed: false; retryAfterSec: number }>;
}

/** In-process (default) or Redis-backed (REDIS_URL) fixed windows per rule, via rate-limiter-flexible. */
export class FlexibleRateLimiter implements RateLimiter {
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  constructor(private readonly redis?: Redis) {}

  private limiterFor(rule: RateLimitRule): RateLimiterAbstract {
    const id = `${rule.points}/${rule.windowSeconds}`;
    let l = this.limiters.get(id);
    if (!l) {
      const opts = { points: rule.points, duration: rule.windowSeconds, keyPrefix: `nube-rl-${id}` };
      l = this.redis
        ? new RateLimiterRedis({ ...opts, storeClient: this.redis, useRedisPackage: false })
        : new RateLimiterMemory(opts);
      this.limiters.set(id, l);
    }
    return l;
  }

  async consume(key: string, rule: RateLimitRule) {
    try {
      await this.limiterFor(rule).consume(key, 1);
      return { allowed: true as const };
    } catch (e) {
      if (e instanceof RateLimiterRes) {
        return { allowed: false as const, retryAfterSec: Math.max(1, Math.ceil(e.msBeforeNext / 1000)) };
      }
      throw e;
    }
  }
}

/** 403 when creating one more counted resource would pass the plan's allowance (spec: database creation). */
export function assertWithinAllowance(plan: PlanName, what: CountedAllowance, current: number): void {
  const allowed = PLANS[plan][what];
  if (current >= allowed) {
    throw errors.forbidden(
      `your ${PLANS[plan].title} plan allows ${allowed} ${what}; delete one or change plan`,
      'PlanLimitReached',
      { limit: allowed, current },
    );
  }
}

/** 402 when `addBytes` more would pass the plan's storage allowance. */
export function assertStorageAvailable(plan: PlanName, usedBytes: number, addBytes: number): void {
  const allowed = PLANS[plan].storageBytes;
  if (usedBytes + addBytes > allowed) {
    throw errors.paymentRequired(
      `storage allowance of your ${PLANS[plan].title} plan (${allowed} bytes) would be exceeded`,
      'StorageQuotaExceeded',
      { limitBytes: allowed, usedBytes, requestedBytes: addBytes },
    );
  }
}
