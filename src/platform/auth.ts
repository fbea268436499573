import type { PlanName } from './plans.js';
import { errors } from './errors.js';

/**
 * Credential schemes. Each operation lists the ones it accepts. Areas register a resolver per scheme
 * (owner keys come from the account area, `agt_` tokens from agents, and so on); the platform only
 * extracts the credential, routes it by prefix and checks the operation allows the scheme.
 */
export const SCHEMES = {
  public: { description: 'No credential.' },
  owner: { prefix: 'nube_sk_live_', description: 'Owner API key (Authorization: Bearer or X-API-Key).' },
  agent: { prefix: 'agt_', description: "An agent's embed token: message and try of that agent only." },
  fleetAgent: { prefix: 'flt_tk_', description: 'A fleet agent token with scope MESSAGE.' },
  fleetPublic: { prefix: 'flt_pk_', description: 'Ephemeral fleet public key: read a conversation.' },
  share: { prefix: 'shr_', description: 'Share token, in query `token`, in place of the credential.' },
  client: { prefix: 'nube_cc_', description: 'Client credential: list fleet agents.' },
  database: { prefix: 'nube_db_', description: 'Database token: SQL on one database (libSQL authToken, query).' },
} as const;

export type SchemeName = keyof typeof SCHEMES;

export interface Principal {
  scheme: SchemeName;
  /** Owner account every resource belongs to; '' only for the public scheme. */
  ownerId: string;
  plan: PlanName;
  /** Id of the credential (key id, token id) for logs and revocation. */
  credentialId?: string;
  /** Scoped credentials carry the one resource they may address (agent id, fleet agent id, file id). */
  resourceId?: string;
}

export const PUBLIC_PRINCIPAL: Principal = { scheme: 'public', ownerId: '', plan: 'byte' };

export interface CredentialResolver {
  scheme: Exclude<SchemeName, 'public'>;
  /**
   * Returns the principal for a well-formed, valid credential, or null. Must compare in constant time.
   * A resolver with the answer cached returns it synchronously: the request's hot path then awaits nothing.
   */
  resolve(credential: string): Principal | null | Promise<Principal | null>;
}

export interface CredentialSource {
  authorization?: string | string[];
  apiKey?: string | string[];
  queryToken?: string;
  /**
   * The browser console's session cookie travels with the request's `Cookie` header; it stands for the
   * owner only when the request proves it comes from nube's own pages (see `sameOrigin`).
   */
  cookie?: string | string[];
  /** What the CSRF check reads for a cookie credential; absent, the cookie is never looked at. */
  request?: CookieRequest;
}

/** The parts of a request the console cookie's CSRF check reads. */
export interface CookieRequest {
  /** Whether the call changes state (anything but GET/HEAD, and every WebSocket upgrade). */
  stateChanging: boolean;
  host?: string;
  origin?: string | string[];
  secFetchSite?: string | string[];
}

/** Resolves the console's session cookie (`name`) to the owner it signed in as, or null. */
export interface SessionResolver {
  cookieName: string;
  resolve(token: string): Principal | null | Promise<Principal | null>;
}

/**
 * A cookie-authenticated call is CSRF-safe when it comes from a page of this very host: the cookie is
 * SameSite=Strict (no cross-site request carries it), and a state-changing call must also name this host
 * as its Origin (or say `Sec-Fetch-Site: same-origin`), which a cross-site form or script cannot forge.
 */
export function sameOrigin(r: CookieRequest): boolean {
  if (!r.stateChanging) return true;
  const origin = first(r.origin);
  if (origin && origin !== 'null') {
    try {
      return !!r.host && new URL(origin).host === r.host;
    } catch {
      return false;
    }
  }
  return first(r.secFetchSite) === 'same-origin';
}

/** The value of cookie `name` in a `Cookie` header. */
export function readCookie(header: string | string[] | undefined, name: string): string | undefined {
  const h = first(header);
  if (!h) return undefined;
  for (const part of h.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

const PREFIXES = Object.entries(SCHEMES).flatMap(([name, s]) =>
  'prefix' in s ? [[s.prefix, name as Exclude<SchemeName, 'public'>] as const] : [],
);

export function schemeOf(credential: string): Exclude<SchemeName, 'public'> | undefined {
  for (const [prefix, name] of PREFIXES) if (credential.startsWith(prefix)) return name;
  return undefined;
}

export class Authenticator {
  private readonly resolvers = new Map<string, CredentialResolver>();
  private session: SessionResolver | undefined;

  register(resolver: CredentialResolver): void {
    this.resolvers.set(resolver.scheme, resolver);
  }

  /** The console's session cookie: accepted in place of an owner key, only where the CSRF check passes. */
  registerSession(resolver: SessionResolver): void {
    this.session = resolver;
  }

  /** Principal for the request's credential against the schemes `accepted`; throws 401/403. */
  authenticate(src: CredentialSource, accepted: readonly SchemeName[]): Principal | Promise<Principal> {
    const credential = extract(src, accepted.includes('share'));
    if (!credential) {
      const fromCookie = this.fromCookie(src, accepted);
      if (fromCookie) return fromCookie;
      if (accepted.includes('public')) return PUBLIC_PRINCIPAL;
      throw errors.unauthorized();
    }
    const scheme = schemeOf(credential);
    const resolver = scheme && this.resolvers.get(scheme);
    const principal = resolver ? resolver.resolve(credential) : null;
    return principal instanceof Promise ? principal.then((p) => admit(p, accepted)) : admit(principal, accepted);
  }

  private fromCookie(src: CredentialSource, accepted: readonly SchemeName[]): Principal | Promise<Principal> | undefined {
    if (!this.session || !src.request || !accepted.includes('owner')) return undefined;
    const token = readCookie(src.cookie, this.session.cookieName);
    if (!token) return undefined;
    if (!sameOrigin(src.request))
      throw errors.forbidden('a console session cookie is accepted only from nube\'s own pages (Origin must be this host)', 'CrossSiteRequest');
    const principal = this.session.resolve(token);
    return principal instanceof Promise ? principal.then((p) => admit(p, accepted)) : admit(principal, accepted);
  }
}

function admit(principal: Principal | null, accepted: readonly SchemeName[]): Principal {
  if (!principal) {
    if (accepted.includes('public')) return PUBLIC_PRINCIPAL;
    throw errors.unauthorized();
  }
  if (!accepted.includes(principal.scheme) && !accepted.includes('public')) {
    const article = /^[aeiou]/.test(principal.scheme) ? 'an' : 'a';
    throw errors.forbidden(
      `this operation takes ${accepted.join(' or ')} credentials, not ${article} ${principal.scheme} credential`,
      'CredentialNotAllowed',
    );
  }
  return principal;
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function extract(src: CredentialSource, allowQueryToken: boolean): string | undefined {
  const auth = first(src.authorization);
  if (auth) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (m) return m[1];
  }
  const key = first(src.apiKey)?.trim();
  if (key) return key;
  if (allowQueryToken && src.queryToken) return src.queryToken;
  return undefined;
}
