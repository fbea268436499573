// Who is calling. The control plane takes a nube owner key (X-API-KEY, as E2B's SDK sends its key).
// The in-sandbox surface (envd, the code interpreter) gets no key from the SDK, only the tokens the
// create/connect answer handed out (envdAccessToken, trafficAccessToken): here one sealed token that
// names the owner, the plan and the one sandbox it opens, so no table is needed to check it.
import type { IncomingHttpHeaders } from 'node:http';
import type { PlatformDeps } from '../../areas/deps.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { RateLimitRule } from '../../platform/operation.js';
import type { PlanName } from '../../platform/plans.js';

/** E2B sandbox ids go into DNS labels (`<port>-<id>.<domain>`): nube's `sbx_` is spelled `sbx-`. */
export const toE2bId = (id: string) => id.replace('_', '-');
export const toNubeId = (id: string) => id.replace(/^sbx-/, 'sbx_');

export const ENVD_PORT = 49983;

function one(h: string | string[] | undefined): string | undefined {
  return Array.isArray(h) ? h[0] : h;
}

export class Access {
  constructor(private readonly deps: PlatformDeps) {}

  /** The control plane's principal: a nube owner key, as X-API-KEY or a bearer token. */
  owner(headers: IncomingHttpHeaders): Principal | Promise<Principal> {
    return this.deps.auth.authenticate(
      { apiKey: one(headers['x-api-key']), authorization: one(headers.authorization) },
      ['owner'],
    );
  }

  /**
   * The API's rate limits hold here too: `bucket` is shared with the matching nube operation where
   * there is one (creating a sandbox counts against `sandboxes.create` whichever surface does it).
   */
  async limit(p: Principal, bucket: string, rule?: RateLimitRule): Promise<void> {
    const r = await this.deps.rateLimiter.consume(
      `${p.ownerId}:${bucket}`,
      rule ?? { points: this.deps.config.rateLimitPerMinute, windowSeconds: 60 },
    );
    if (!r.allowed) throw errors.tooManyRequests(r.retryAfterSec);
  }

  /** The token handed to the SDK for one sandbox. */
  tokenFor(p: Principal, nubeId: string): string {
    return this.deps.secretBox.seal(JSON.stringify({ o: p.ownerId, p: p.plan, s: nubeId }));
  }

  /**
   * The sandbox an in-sandbox request addresses (E2b-Sandbox-Id) and the principal its token stands
   * for; null when the token is missing, forged, or for another sandbox.
   */
  sandbox(headers: IncomingHttpHeaders): { id: string; principal: Principal } | null {
    const raw = one(headers['e2b-sandbox-id']);
    const token = one(headers['x-access-token']) ?? one(headers['e2b-traffic-access-token']);
    if (!raw || !token) return null;
    const id = toNubeId(raw);
    try {
      const t = JSON.parse(this.deps.secretBox.open(token)) as { o?: string; p?: string; s?: string };
      if (t.s !== id || !t.o || !t.p) return null;
      return { id, principal: { scheme: 'owner', ownerId: t.o, plan: t.p as PlanName } };
    } catch {
      return null;
    }
  }
}
