// The console's sign-in: an owner API key is exchanged once for a session token that lives only in an
// HttpOnly, SameSite=Strict cookie (the key itself never reaches the browser's storage), and a CSRF
// token bound to that session, which the sign-in answer hands to the page and nothing hands out again:
// the cookie alone, wherever it leaks to, opens nothing. The store keeps the token's SHA-256; sign-out
// deletes the row; revoking the key signs its sessions out too.
import type { Authenticator, Principal, SessionResolver } from '../../platform/auth.js';
import { hmacHex, safeEqual, sha256Hex } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { newId, randomToken } from '../../platform/ids.js';
import type { ConsoleSessionsRepo } from './sessions-repo.js';

/** Over plain HTTP. */
export const SESSION_COOKIE = 'nube_console';
/** Over HTTPS: Secure, and `__Host-` (no Domain, Path=/), so no sibling host can set or shadow it. */
export const SECURE_SESSION_COOKIE = '__Host-nube_console';
export const cookieName = (secure: boolean) => (secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE);
/** A session's whole life: signed in this long at most, whatever the activity. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

export interface KeyOwners {
  principalOfKey(keyId: string): Promise<Principal | null>;
}

export class ConsoleSessions {
  constructor(
    private readonly repo: ConsoleSessionsRepo,
    private readonly auth: Authenticator,
    private readonly keys: KeyOwners,
    private readonly secret: string,
  ) {}

  /** The session's CSRF token: derived from its id under nube's secret, so it needs no row of its own. */
  private csrfToken(sessionId: string): string {
    return hmacHex(this.secret, `console-csrf:${sessionId}`);
  }

  /** A new session for a valid owner key: the cookie's token, the page's CSRF token, when it expires. */
  async signIn(key: string): Promise<{ token: string; csrfToken: string; expiresAt: number; principal: Principal }> {
    const principal = await Promise.resolve()
      .then(() => this.auth.authenticate({ authorization: `Bearer ${key}` }, ['owner']))
      .catch(() => null);
    if (!principal?.credentialId) throw errors.unauthorized('that API key is not valid (or was revoked)');
    const token = `ncs_${randomToken(40)}`;
    const now = Date.now();
    await this.repo.purgeExpired(now);
    const expiresAt = now + SESSION_TTL_MS;
    const id = newId('cses');
    await this.repo.insert({ id, tokenHash: sha256Hex(token), ownerId: principal.ownerId, keyId: principal.credentialId, createdAt: now, expiresAt });
    return { token, csrfToken: this.csrfToken(id), expiresAt, principal };
  }

  async signOut(token: string): Promise<boolean> {
    return this.repo.delete(sha256Hex(token));
  }

  async resolve(token: string): Promise<Principal | null> {
    if (!token.startsWith('ncs_') || token.length > 100) return null;
    const row = await this.repo.byToken(sha256Hex(token), Date.now());
    if (!row) return null;
    const p = await this.keys.principalOfKey(row.keyId);
    return p && p.ownerId === row.ownerId ? { ...p, credentialId: row.id } : null;
  }

  readonly resolver: SessionResolver = {
    cookieName,
    resolve: (t) => this.resolve(t),
    csrfValid: (p, csrf) => !!p.credentialId && safeEqual(csrf, this.csrfToken(p.credentialId)),
  };

  purgeExpired(): Promise<number> {
    return this.repo.purgeExpired(Date.now());
  }
}
