import type { PlanName } from './plans.js';
import { ApiError, errors } from './errors.js';
import { ProxyTrust } from './request-origin.js';
import { checkScope, ipAllowed, type KeyScope } from './scopes.js';

/**
 * Credential schemes. Each operation lists the ones it accepts. Areas register a resolver per scheme
 * (owner keys come from the account area, `agt_` tokens from agents, and so on); the platform only
 * extracts the credential, routes it by prefix and checks the operation allows the scheme.
 */
export const SCHEMES = {
  public: { description: 'No credential.' },
  owner: {
    prefix: 'nube_sk_live_',
    description: 'Owner API key, `nube_sk_live_...` or `e2b_<hex>` (Authorization: Bearer or X-API-Key).',
  },
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
  /** A scoped owner key's limits (platform/scopes.ts); absent for a full owner key. */
  scope?: KeyScope;
  /**
   * `agent:<id>` / `machine:<id>` for a key nube minted into that box: accepted only through the box
   * API from that box's bridge address (platform/box-api.ts).
   */
  holder?: string;
}

/**
 * What the credential is used for. A scoped key is checked against `operation`; an entry point that
 * names none (the console's sign-in, E2B, libSQL, terminals, an agent's raw ACP socket) takes only full
 * keys, unless it says `anyScope` and checks operations itself (MCP replays every tool call through REST).
 */
export interface AuthUse {
  operation?: { id: string; method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'; access?: 'read' | 'write' };
  anyScope?: boolean;
  /** The source address, for keys with allowedIps. */
  ip?: string;
  /** The bridge address the request came from through the box API (platform/box-api.ts boxSource). */
  box?: string;
  /**
   * On a request another node relayed: the id of the minted key that node found bound to its box (the
   * box is there, so only that node can check its address; platform/node-forward.ts).
   */
  boxVouched?: string;
}

/** The bridge address of the box a holder (`agent:<id>`, `machine:<id>`) runs in now, or null. */
export type HolderAddress = (ownerId: string, holder: string) => Promise<string | null>;

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
   * owner only with the session's CSRF token, from nube's own pages (see `sameOrigin`).
   */
  cookie?: string | string[];
  /** What the CSRF check reads for a cookie credential; absent, the cookie is never looked at. */
  request?: CookieRequest;
}

/** The parts of a request the console cookie's CSRF checks read. */
export interface CookieRequest {
  /** Whether the call changes state (anything but GET/HEAD, and every WebSocket upgrade). */
  stateChanging: boolean;
  /** The browser used HTTPS (directly or to a trusted proxy): the cookie is then the `__Host-` one. */
  secure: boolean;
  /** The host the browser addressed (platform/request-origin.ts). */
  host?: string;
  origin?: string | string[];
  secFetchSite?: string | string[];
  /** The session's CSRF token (header `x-nube-csrf`, or WebSocket subprotocol `nube-csrf.<token>`). */
  csrf?: string;
}

/** Resolves the console's session cookie to the owner it signed in as, or null. */
export interface SessionResolver {
  /** The cookie's name for a request over HTTPS (`__Host-`, Secure) or plain HTTP. */
  cookieName(secure: boolean): string;
  resolve(token: string): Principal | null | Promise<Principal | null>;
  /** Whether `csrf` is the CSRF token of the session `principal` was resolved from (constant time). */
  csrfValid(principal: Principal, csrf: string): boolean;
}

/** Header (and WebSocket subprotocol prefix) carrying the console session's CSRF token. */
export const CSRF_HEADER = 'x-nube-csrf';
export const CSRF_PROTOCOL_PREFIX = 'nube-csrf.';

/**
 * A cookie-authenticated call comes from a page of this very host: the cookie is SameSite=Strict (no
 * cross-site request carries it), and a state-changing call must also name this host as its Origin (or
 * say `Sec-Fetch-Site: same-origin`), which a cross-site form or script cannot forge. A program that
 * copied the cookie can forge both, so the session's CSRF token is required too (Authenticator).
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

/** Owner keys in E2B's format (`e2b_` + hex), which E2B's SDKs accept as they are. */
export const E2B_KEY_PREFIX = 'e2b_';

const PREFIXES = [
  ...Object.entries(SCHEMES).flatMap(([name, s]) => ('prefix' in s ? [[s.prefix, name as Exclude<SchemeName, 'public'>] as const] : [])),
  [E2B_KEY_PREFIX, 'owner'] as const,
];

export function schemeOf(credential: string): Exclude<SchemeName, 'public'> | undefined {
  for (const [prefix, name] of PREFIXES) if (credential.startsWith(prefix)) return name;
  return undefined;
}

export class Authenticator {
  private readonly resolvers = new Map<string, CredentialResolver>();
  private session: SessionResolver | undefined;

  /** `proxy`: the reverse proxies whose forwarded scheme and host are believed (NUBE_TRUST_PROXY). */
  constructor(readonly proxy: ProxyTrust = new ProxyTrust()) {}

  /** Set once every area is built (server.ts): where a minted key's box is now. Unset, held keys are refused. */
  holderAddress: HolderAddress | null = null;

  register(resolver: CredentialResolver): void {
    this.resolvers.set(resolver.scheme, resolver);
  }

  /** The console's session cookie: accepted in place of an owner key, only with its CSRF token and Origin. */
  registerSession(resolver: SessionResolver): void {
    this.session = resolver;
  }

  /** Principal for the request's credential against the schemes `accepted`; throws 401/403. */
  authenticate(src: CredentialSource, accepted: readonly SchemeName[], use: AuthUse = {}): Principal | Promise<Principal> {
    const p = this.authenticateAny(src, accepted);
    if (p instanceof Promise) return p.then((x) => this.bound(x, use)).then((x) => scoped(x, use));
    if (p.holder !== undefined || use.box !== undefined) return this.bound(p, use).then((x) => scoped(x, use));
    return scoped(p, use);
  }

  /**
   * The id of the minted key `src` carries when it is bound to the box at `box` on this node, else
   * undefined: what this node vouches for when it relays the box's request to the node holding its
   * resource (the box's address means nothing there).
   */
  async vouchBox(src: CredentialSource, box: string): Promise<string | undefined> {
    try {
      const p = await this.authenticateAny(src, ['owner']);
      return p.holder !== undefined && p.credentialId !== undefined ? (await this.bound(p, { box })).credentialId : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * A key nube minted into a box works only from that box, through the box API: read out of the box
   * (an agent prompted to print it), it is refused anywhere else as if unknown (401), like the LLM
   * gateway's credential. The box API in turn takes nothing but such keys: an owner key, a token or no
   * credential there is refused, so a sandbox reaches no more of nube through it than its own key allows.
   */
  private async bound(p: Principal, use: AuthUse): Promise<Principal> {
    if (p.holder === undefined) {
      if (use.box === undefined) return p;
      throw errors.unauthorized('the box API (a box\'s NUBE_BASE_URL) takes only the key nube minted for that box; use nube\'s public URL for other credentials');
    }
    if (use.box === undefined) {
      if (use.boxVouched !== undefined && use.boxVouched === p.credentialId) return p;
      throw errors.unauthorized();
    }
    if (!this.holderAddress || (await this.holderAddress(p.ownerId, p.holder)) !== use.box) throw errors.unauthorized();
    return p;
  }

  /**
   * Whom a credential stands for, without checking what it is used for (a scoped key's scope, expiry,
   * addresses): the audit log names the account and key of a refused call. Never an authorization.
   */
  identify(src: CredentialSource, accepted: readonly SchemeName[]): Principal | Promise<Principal> {
    return this.authenticateAny(src, accepted);
  }

  private authenticateAny(src: CredentialSource, accepted: readonly SchemeName[]): Principal | Promise<Principal> {
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
    const session = this.session;
    const req = src.request;
    if (!session || !req || !accepted.includes('owner')) return undefined;
    const token = readCookie(src.cookie, session.cookieName(req.secure));
    if (!token) return undefined;
    if (!sameOrigin(req))
      throw errors.forbidden('a console session cookie is accepted only from nube\'s own pages (Origin must be this host)', 'CrossSiteRequest');
    // The cookie alone (copied by whoever it reached) is not a credential: the page's CSRF token, which
    // only the sign-in answer carried, must come with it.
    const withToken = (p: Principal | null): Principal => {
      if (p && !(req.csrf && session.csrfValid(p, req.csrf))) {
        if (accepted.includes('public')) return PUBLIC_PRINCIPAL;
        throw errors.unauthorized(
          `a console session cookie needs the session's CSRF token (header ${CSRF_HEADER}) that nube's console got at sign-in; sign in again`,
        );
      }
      return admit(p, accepted);
    };
    const principal = session.resolve(token);
    return principal instanceof Promise ? principal.then(withToken) : withToken(principal);
  }
}

/** A scoped key's expiry, source address and scope, checked on every use (cached principals included). */
function scoped(p: Principal, use: AuthUse): Principal {
  const scope = p.scope;
  if (!scope) return p;
  if (scope.expiresAt !== undefined && Date.now() >= scope.expiresAt) {
    throw new ApiError(401, 'KeyExpired', `this key expired at ${new Date(scope.expiresAt).toISOString()}; create a new one`);
  }
  if (scope.allowedIps && !ipAllowed(scope.allowedIps, use.ip)) {
    throw errors.forbidden(`this key is not accepted from ${use.ip ?? 'this address'}`, 'AddressNotAllowed');
  }
  if (use.operation) checkScope(scope, use.operation);
  else if (!use.anyScope) throw errors.forbidden('a scoped key reaches only the REST API and MCP; this entry point takes a full owner key', 'ScopeMissing', { scope: '*' });
  return p;
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
