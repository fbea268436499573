// Who is calling. The control plane takes a nube owner key (X-API-KEY, as E2B's SDK sends its key).
// The in-sandbox surface (envd, the code interpreter) gets no key from the SDK, only the tokens the
// create/connect answer handed out: the owner and sandbox ids with an HMAC of them under the server's
// secret, so no table is needed to check them and they stay the same across connects and pauses, as
// E2B's do. Two tokens, two HMAC labels: `envdAccessToken` opens envd (commands, files: root in the
// sandbox), `trafficAccessToken` only the sandbox's ports when they are not public. The traffic token
// is the one handed to browsers and other clients of an app; it must not run commands. The envd token,
// being the same for a sandbox, also finds the sandbox a signed file URL (E2B's `signature`) is for
// when the URL names none (with E2B_SANDBOX_URL set the SDK puts no sandbox in it). A volume's token
// (`e2b-volume`) stands for one volume of one owner, for E2B's volume content API.
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { PlatformDeps } from '../../areas/deps.js';
import type { Principal } from '../../platform/auth.js';
import { hmacHex, safeEqual } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { ruleFor } from '../../platform/limits.js';
import type { RateLimitRule } from '../../platform/operation.js';
import type { PlanName } from '../../platform/plans.js';

/** E2B sandbox ids go into DNS labels (`<port>-<id>.<domain>`): nube's `sbx_` is spelled `sbx-`. */
export const toE2bId = (id: string) => id.replace('_', '-');
export const toNubeId = (id: string) => id.replace(/^sbx-/, 'sbx_');

export const ENVD_PORT = 49983;
/** The code interpreter's port (its /execute and /contexts). */
export const INTERPRETER_PORT = 49999;

function one(h: string | string[] | undefined): string | undefined {
  return Array.isArray(h) ? h[0] : h;
}

/** What a signed file URL signs: envd's `path:operation:username:token[:expiration]`. */
export interface SignedRequest {
  path: string;
  operation: 'read' | 'write';
  /** '' for the default user, as the SDK signs it. */
  username: string;
  signature: string;
  expiration?: string;
}

/** envd's signature of a file URL: `v1_` and the base64 (unpadded) SHA-256 of what it signs. */
export function fileSignature(r: Omit<SignedRequest, 'signature'>, token: string): string {
  const raw = [r.path, r.operation, r.username, token, ...(r.expiration !== undefined ? [r.expiration] : [])].join(':');
  return `v1_${createHash('sha256').update(raw, 'utf8').digest('base64').replace(/=+$/, '')}`;
}

export class Access {
  constructor(
    private readonly deps: PlatformDeps,
    /** The owner's plan (the account area's), for the principal an envd token stands for. */
    private readonly planOf: (ownerId: string) => Promise<PlanName>,
  ) {}

  /** The control plane's principal: a nube owner key, as X-API-KEY or a bearer token. */
  owner(headers: IncomingHttpHeaders): Principal | Promise<Principal> {
    return this.deps.auth.authenticate({ apiKey: one(headers['x-api-key']), authorization: one(headers.authorization) }, ['owner']);
  }

  /**
   * The API's rate limits hold here too: `bucket` is shared with the matching nube operation where
   * there is one (creating a sandbox counts against `sandboxes.create` whichever surface does it).
   */
  async limit(p: Principal, bucket: string, rule?: RateLimitRule): Promise<void> {
    const r = await this.deps.rateLimiter.consume(
      `${p.ownerId}:${bucket}`,
      ruleFor(rule ?? { points: this.deps.config.rateLimitPerMinute, windowSeconds: 60 }, this.deps.config.rateLimits, p.plan),
    );
    if (!r.allowed) throw errors.tooManyRequests(r.retryAfterSec);
  }

  /** The envd token of one sandbox (the same every time it is asked for). */
  tokenFor(ownerId: string, nubeId: string): string {
    return this.token('e2b-envd', ownerId, nubeId);
  }

  /** The traffic token of one sandbox: its ports only. */
  trafficTokenFor(ownerId: string, nubeId: string): string {
    return this.token('e2b-traffic', ownerId, nubeId);
  }

  /** A volume's token (E2B's VolumeAndToken.token, for its content API): the same every time. */
  volumeTokenFor(ownerId: string, volumeId: string): string {
    return this.token('e2b-volume', ownerId, volumeId);
  }

  /** The volume a volume token is for and its owner, or null when it is not one of ours. */
  volumeOpened(token: string): { ownerId: string; id: string } | null {
    return this.opened(token, 'e2b-volume');
  }

  private token(label: string, ownerId: string, nubeId: string): string {
    const payload = `${ownerId}/${nubeId}`;
    return `${Buffer.from(payload).toString('base64url')}.${hmacHex(this.deps.config.secret, `${label}:${payload}`)}`;
  }

  /** Whether `token` (the e2b-traffic-access-token header's value) opens this sandbox's ports. */
  opensTraffic(token: string | string[] | undefined, ownerId: string, nubeId: string): boolean {
    const t = one(token);
    return t !== undefined && safeEqual(t, this.trafficTokenFor(ownerId, nubeId));
  }

  /** The sandbox a token (of the label's kind) opens and its owner, or null when it is not one of ours. */
  private opened(token: string, label: 'e2b-envd' | 'e2b-traffic' | 'e2b-volume'): { ownerId: string; id: string } | null {
    const dot = token.indexOf('.');
    if (dot <= 0) return null;
    const payload = Buffer.from(token.slice(0, dot), 'base64url').toString('utf8');
    const [ownerId, id, extra] = payload.split('/');
    if (!ownerId || !id || extra !== undefined || !safeEqual(token, this.token(label, ownerId, id))) return null;
    return { ownerId, id };
  }

  async principalOf(ownerId: string): Promise<Principal> {
    return { scheme: 'owner', ownerId, plan: await this.planOf(ownerId) };
  }

  /**
   * The sandbox an in-sandbox request addresses (E2b-Sandbox-Id) and the principal its token stands
   * for; null when the token is missing, forged, or for another sandbox. envd takes only its own token
   * (X-Access-Token). The code interpreter is a port of the sandbox (49999), so with `port` its traffic
   * token (E2B-Traffic-Access-Token, what the interpreter SDK's context calls send) opens it too, as
   * E2B's proxy lets it.
   */
  async sandbox(headers: IncomingHttpHeaders, port = false): Promise<{ id: string; principal: Principal } | null> {
    const raw = one(headers['e2b-sandbox-id']);
    const envd = one(headers['x-access-token']);
    const traffic = port ? one(headers['e2b-traffic-access-token']) : undefined;
    if (!raw || (!envd && !traffic)) return null;
    const t = (envd ? this.opened(envd, 'e2b-envd') : null) ?? (traffic ? this.opened(traffic, 'e2b-traffic') : null);
    if (!t || t.id !== toNubeId(raw)) return null;
    // An account that is gone opens nothing.
    const principal = await this.principalOf(t.ownerId).catch(() => null);
    return principal ? { id: t.id, principal } : null;
  }

  /**
   * Of `candidates` (sandbox and owner ids), the one whose token signed `r`, or null. Tried one by one:
   * a SHA-256 each, for the sandboxes of this node created through E2B.
   */
  signer(r: SignedRequest, candidates: { id: string; ownerId: string }[]): { id: string; ownerId: string } | null {
    for (const c of candidates) {
      if (safeEqual(fileSignature(r, this.tokenFor(c.ownerId, c.id)), r.signature)) return c;
    }
    return null;
  }
}
