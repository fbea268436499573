import type { Redis } from 'ioredis';
import { type RateLimiterAbstract, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { RateLimitSettings } from './config-shape.js';
import type { PlanName } from './plans.js';
import { errors } from './errors.js';
import type { RateLimitRule } from './operation.js';
import { type CountedAllowance, PLANS } from './plans.js';

/** Consumes one request for `key` under `rule`; returns seconds to wait when over the limit. */
export type RateLimitResult = { allowed: true } | { allowed: false; retryAfterSec: number };

export interface RateLimiter {
  /** The in-process limiter answers synchronously; a shared one (Redis) with a promise. */
  consume(key: string, rule: RateLimitRule): RateLimitResult | Promise<RateLimitResult>;
}

/** The rule as this caller gets it: an operator setting for the plan replaces the rule's own points. */
export function ruleFor(rule: RateLimitRule, settings: RateLimitSettings, plan: PlanName): RateLimitRule {
  if (!rule.setting) return rule;
  return { points: settings[rule.setting][plan], windowSeconds: rule.windowSeconds };
}

const ALLOWED: RateLimitResult = { allowed: true };

/**
 * In-process fixed windows (the embedded default): a Map lookup per request, no timers. Windows that
 * have ended are swept once a minute so the map holds only live (owner, operation) pairs.
 */
export class MemoryRateLimiter implements RateLimiter {
  private readonly windows = new Map<string, { count: number; resetAt: number }>();
  private sweepAt = 0;

  consume(key: string, rule: RateLimitRule): RateLimitResult {
    const now = Date.now();
    if (now >= this.sweepAt) {
      for (const [k, w] of this.windows) if (w.resetAt <= now) this.windows.delete(k);
      this.sweepAt = now + 60_000;
    }
    const k = `${rule.points}/${rule.windowSeconds}:${key}`;
    let w = this.windows.get(k);
    if (!w || w.resetAt <= now) {
      w = { count: 0, resetAt: now + rule.windowSeconds * 1000 };
      this.windows.set(k, w);
    }
    if (w.count >= rule.points) {
      return { allowed: false as const, retryAfterSec: Math.max(1, Math.ceil((w.resetAt - now) / 1000)) };
    }
    w.count++;
    return ALLOWED;
  }
}

/** Fixed windows per rule shared by every replica through Redis (REDIS_URL), via rate-limiter-flexible. */
export class FlexibleRateLimiter implements RateLimiter {
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  constructor(private readonly redis: Redis) {}

  private limiterFor(rule: RateLimitRule): RateLimiterAbstract {
    const id = `${rule.points}/${rule.windowSeconds}`;
    let l = this.limiters.get(id);
    if (!l) {
      const opts = { points: rule.points, duration: rule.windowSeconds, keyPrefix: `nube-rl-${id}` };
      l = new RateLimiterRedis({ ...opts, storeClient: this.redis, useRedisPackage: false });
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
