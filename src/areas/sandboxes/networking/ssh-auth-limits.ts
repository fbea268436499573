// The SSH gateway's answer to guessing: failed logins are counted per client address, per address and
// target sandbox, per target sandbox from everywhere, and per presented ticket, so one client's mistakes
// stop that client, not every client behind the same NAT. A refused attempt is refused at once: an
// address past its budget is cut at the TCP accept (before any key exchange), an attempt past the other
// budgets is answered "no" without its ticket being looked up. Counts go through the platform's rate
// limiter (shared through Redis between nodes); the refusals each node has seen are kept here.
import { sha256Hex } from '../../../platform/crypto.js';
import type { RateLimiter, RateLimitResult } from '../../../platform/limits.js';

/** Failed logins allowed per window before that key is refused until the window ends. */
export const SSH_AUTH_LIMITS = {
  /** One client address, all sandboxes: a spray of guesses. Past it, its connections are cut at once. */
  address: { points: 30, windowSeconds: 60 },
  /** One client address on one sandbox. */
  target: { points: 5, windowSeconds: 60 },
  /**
   * One sandbox, from every address (guesses spread over many addresses). Past it, an address that fails
   * on this sandbox is refused there at once; an address that has not failed still has its ticket
   * checked, so guessing from elsewhere cannot lock the sandbox's own users out.
   */
  sandbox: { points: 30, windowSeconds: 60 },
  /** One presented ticket for one sandbox, from any address: a client retrying an expired or revoked ticket. */
  ticket: { points: 5, windowSeconds: 60 },
} as const;

const SANDBOX_ID = /^sbx_[a-z0-9]{1,40}$/;
/** Refusals remembered at most; expired ones are swept when the map grows past this. */
const MAX_REMEMBERED = 100_000;

export class SshAuthLimits {
  /** Key -> epoch ms until which it is refused. */
  private readonly refused = new Map<string, number>();

  constructor(private readonly limiter: RateLimiter) {}

  private keys(ip: string, user: string, password: string) {
    const target = SANDBOX_ID.test(user) ? user : '-';
    return {
      address: `ssh-auth:ip:${ip}`,
      target: `ssh-auth:target:${ip}:${target}`,
      sandbox: `ssh-auth:sandbox:${target}`,
      ticket: `ssh-auth:ticket:${target}:${sha256Hex(password).slice(0, 32)}`,
    };
  }

  private wait(key: string, now = Date.now()): number {
    const until = this.refused.get(key);
    if (until === undefined) return 0;
    if (now < until) return Math.ceil((until - now) / 1000);
    this.refused.delete(key);
    return 0;
  }

  /** Seconds connections from this address are cut for (0: let it in). */
  addressWait(ip: string): number {
    return this.wait(`ssh-auth:ip:${ip}`);
  }

  /** Seconds this login is refused for without being checked (0: check its ticket). */
  attemptWait(ip: string, user: string, password: string): number {
    const k = this.keys(ip, user, password);
    return Math.max(this.wait(k.address), this.wait(k.target), this.wait(k.ticket));
  }

  /** A login failed: counted against every key it touches; a key past its budget is refused. */
  async failed(ip: string, user: string, password: string): Promise<void> {
    const k = this.keys(ip, user, password);
    const [address, target, sandbox, ticket] = await Promise.all([
      this.limiter.consume(k.address, SSH_AUTH_LIMITS.address),
      this.limiter.consume(k.target, SSH_AUTH_LIMITS.target),
      this.limiter.consume(k.sandbox, SSH_AUTH_LIMITS.sandbox),
      this.limiter.consume(k.ticket, SSH_AUTH_LIMITS.ticket),
    ]);
    if (this.refused.size > MAX_REMEMBERED) for (const key of [...this.refused.keys()]) this.wait(key);
    const refuse = (key: string, r: RateLimitResult) => {
      if (!r.allowed) this.refused.set(key, Date.now() + Math.max(1, r.retryAfterSec) * 1000);
    };
    refuse(k.address, address);
    // A sandbox under a spread attack: every address failing on it is refused there from now on.
    refuse(k.target, target.allowed ? sandbox : target);
    refuse(k.ticket, ticket);
  }
}
