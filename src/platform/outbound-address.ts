// Which addresses outbound requests may reach (SSRF rules): nube fetches URLs that users give it
// (webhook endpoints, web fetch and crawl, an account's AI endpoint). None of them may reach the host
// itself, the private network, the cloud metadata service (169.254.169.254) or any other non-public
// address unless the operator's allow-list (NUBE_OUTBOUND_ALLOW) admits it. The one client that makes
// such requests, and applies these rules to every hop, is `outbound.ts`.
//
// Two checks, because DNS can change between them (rebinding): `assertPublicUrl` when the URL is saved,
// and `safeLookup` as the `lookup` of the socket that actually connects, so the address connected to is
// the very address that was checked. Sockets skip `lookup` for IP literals, so the client also runs
// `assertPublicUrl(url, allow, { dns: false })` before each hop.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, isIPv4 } from 'node:net';

/** Why an outbound request failed; callers map the code to their own API error. */
export type OutboundErrorCode =
  | 'OutboundBlocked'
  | 'OutboundTimeout'
  | 'OutboundAborted'
  | 'HostNotFound'
  | 'ConnectionRefused'
  | 'TooManyRedirects'
  | 'OutboundFailed';

export class OutboundError extends Error {
  constructor(
    readonly code: OutboundErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'OutboundError';
  }
}

/** The address (or a redirect's, or the URL's form) is refused: nothing was sent to it. */
export class OutboundBlockedError extends OutboundError {
  declare readonly code: 'OutboundBlocked';
  constructor(
    message: string,
    readonly address?: string,
  ) {
    super('OutboundBlocked', message);
    this.name = 'OutboundBlockedError';
  }
}

interface Cidr {
  v: 4 | 6;
  base: bigint;
  bits: number;
}

/** A parsed allow-list; build once with `parseAllowList` and reuse. */
export interface AllowList {
  readonly cidrs: readonly Cidr[];
}

function v4ToBig(ip: string): bigint {
  return ip.split('.').reduce((n, part) => (n << 8n) | BigInt(Number(part)), 0n);
}

/** The 8 groups of an IPv6 address (`isIP(ip) === 6` already checked; zone id stripped). */
function v6Groups(ip: string): number[] {
  let s = ip;
  const tail: number[] = [];
  const i = s.lastIndexOf(':');
  const last = s.slice(i + 1);
  if (isIPv4(last)) {
    const n = Number(v4ToBig(last));
    tail.push(n >>> 16, n & 0xffff);
    // Keep a "::" that precedes the IPv4 part ("::1.2.3.4" -> "::", "::ffff:1.2.3.4" -> "::ffff").
    s = s.slice(0, s[i - 1] === ':' ? i + 1 : i);
  }
  const [head = '', rest] = s.split('::');
  const parse = (p: string) => (p === '' ? [] : p.split(':').map((g) => Number.parseInt(g, 16)));
  const left = parse(head);
  const right = rest === undefined ? [] : parse(rest);
  const zeros = rest === undefined ? 0 : 8 - tail.length - left.length - right.length;
  return [...left, ...new Array<number>(zeros).fill(0), ...right, ...tail];
}

/**
 * An address as (version, integer). IPv4-mapped IPv6 (`::ffff:127.0.0.1`, `::ffff:7f00:1`) becomes
 * the IPv4 address it names: the kernel connects to that IPv4 address, so it must be judged as one.
 */
function toBig(ip: string): { v: 4 | 6; n: bigint } | undefined {
  const clean = ip.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const kind = isIP(clean);
  if (kind === 4) return { v: 4, n: v4ToBig(clean) };
  if (kind !== 6) return undefined;
  const g = v6Groups(clean);
  const n = g.reduce((acc, x) => (acc << 16n) | BigInt(x), 0n);
  if (n >> 32n === 0xffffn) return { v: 4, n: n & 0xffffffffn };
  return { v: 6, n };
}

function parseCidr(text: string): Cidr {
  const [addr = '', prefix] = text.trim().split('/');
  const ip = toBig(addr);
  if (!ip) throw new Error(`not an IP address or CIDR: ${text}`);
  // A mapped IPv6 entry becomes IPv4, so its prefix loses the 96 leading bits.
  const width = ip.v === 4 ? 32 : 128;
  const declaredWidth = isIP(addr.replace(/%.*$/, '')) === 6 ? 128 : 32;
  let bits = prefix === undefined ? width : Number(prefix);
  if (!/^\d+$/.test(prefix ?? '0') || bits > declaredWidth) throw new Error(`bad prefix length in ${text}`);
  if (declaredWidth !== width) bits = Math.max(0, bits - 96);
  const shift = BigInt(width - bits);
  return { v: ip.v, base: (ip.n >> shift) << shift, bits };
}

function inCidr(ip: { v: 4 | 6; n: bigint }, c: Cidr): boolean {
  if (ip.v !== c.v) return false;
  const shift = BigInt((c.v === 4 ? 32 : 128) - c.bits);
  return ip.n >> shift === c.base >> shift;
}

// Everything that is not ordinary public unicast: IANA special-purpose registries (RFC 6890 and later).
const NON_PUBLIC = [
  '0.0.0.0/8', // "this network"; 0.0.0.0 connects to the local host on Linux
  '10.0.0.0/8',
  '100.64.0.0/10', // CGNAT
  '127.0.0.0/8',
  '169.254.0.0/16', // link-local, cloud metadata
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
  '::/96', // unspecified, loopback, IPv4-compatible (mapped ones were turned into IPv4 above)
  '64:ff9b::/96', // NAT64: would reach any IPv4 address, private ones included
  '64:ff9b:1::/48',
  '100::/64', // discard
  '2001::/32', // Teredo: tunnels to an embedded IPv4 address
  '2001:2::/48',
  '2001:10::/28',
  '2001:20::/28',
  '2001:db8::/32',
  '2002::/16', // 6to4: embeds an IPv4 address
  '3fff::/20',
  'fc00::/7', // unique local (fd00::/8)
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
].map(parseCidr);
const GLOBAL_V6 = parseCidr('2000::/3');

export function parseAllowList(entries: readonly string[]): AllowList {
  return { cidrs: entries.map(parseCidr) };
}

const asAllowList = (allow: AllowList | readonly string[]): AllowList =>
  Array.isArray(allow) ? parseAllowList(allow as readonly string[]) : (allow as AllowList);

/** True for an ordinary public unicast address; false for anything special, or for a non-address. */
export function isPublicAddress(ip: string): boolean {
  const a = toBig(ip);
  if (!a) return false;
  if (a.v === 6 && !inCidr(a, GLOBAL_V6)) return false;
  return !NON_PUBLIC.some((c) => inCidr(a, c));
}

/** Whether two addresses or CIDRs (`10.0.0.0/8`, `10.1.2.3`) share an address; false across families. */
export function cidrsOverlap(a: string, b: string): boolean {
  const x = parseCidr(a);
  const y = parseCidr(b);
  if (x.v !== y.v) return false;
  const bits = Math.min(x.bits, y.bits);
  const shift = BigInt((x.v === 4 ? 32 : 128) - bits);
  return x.base >> shift === y.base >> shift;
}

/** Whether `inner` lies wholly inside `outer` (addresses or CIDRs). */
export function cidrWithin(inner: string, outer: string): boolean {
  const i = parseCidr(inner);
  return i.bits >= parseCidr(outer).bits && cidrsOverlap(inner, outer);
}

/** Whether the address is inside one of the list's ranges. */
export function inAllowList(ip: string, allow: AllowList): boolean {
  const a = toBig(ip);
  return !!a && allow.cidrs.some((c) => inCidr(a, c));
}

/** Public, or admitted by the operator's allow-list. */
export function isAllowedAddress(ip: string, allow: AllowList | readonly string[]): boolean {
  return inAllowList(ip, asAllowList(allow)) || isPublicAddress(ip);
}

export interface CheckedUrl {
  url: URL;
  /** Addresses the host resolved to (empty when `dns: false` and the host is a name). */
  addresses: LookupAddress[];
}

export type Resolver = (host: string) => Promise<LookupAddress[]>;
const systemResolve: Resolver = (host) =>
  new Promise((resolve, reject) =>
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))),
  );

/**
 * Refuses a URL that is not http(s) or whose host is, or resolves to, an address that is not public
 * and not allowed. A name resolving to several addresses is refused if any one of them is refused:
 * the connection could use any. Throws OutboundBlockedError; DNS errors (ENOTFOUND) pass through.
 */
export async function assertPublicUrl(
  input: string | URL,
  allow: AllowList | readonly string[],
  opts: { dns?: boolean; resolve?: Resolver } = {},
): Promise<CheckedUrl> {
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    throw new OutboundBlockedError('not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new OutboundBlockedError('only http and https URLs are allowed');
  }
  const list = asAllowList(allow);
  // WHATWG URL parsing already turns decimal, octal and hex IPv4 forms (2130706433, 0177.1) into
  // dotted quads, so a literal is recognised whatever way it was written.
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) {
    if (!isAllowedAddress(host, list)) throw blocked(host);
    return { url, addresses: [{ address: host, family: isIP(host) }] };
  }
  if (opts.dns === false) return { url, addresses: [] };
  const addresses = await (opts.resolve ?? systemResolve)(host);
  if (!addresses.length) throw new OutboundBlockedError(`${host} did not resolve`);
  for (const a of addresses) if (!isAllowedAddress(a.address, list)) throw blocked(a.address, host);
  return { url, addresses };
}

const blocked = (address: string, host?: string) =>
  new OutboundBlockedError(
    `${host ? `${host} resolves to ` : ''}${address}, which is not a public address (the operator can admit it with NUBE_OUTBOUND_ALLOW)`,
    address,
  );

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/tls/http sockets (and undici's `connect.lookup`) that resolves the name and
 * refuses it unless every address is allowed, handing back the checked address(es) so the socket
 * connects to exactly what was checked.
 */
export function safeLookup(allow: AllowList | readonly string[], resolve: Resolver = systemResolve) {
  const list = asAllowList(allow);
  return (hostname: string, options: { all?: boolean } | number | LookupCallback, callback?: LookupCallback): void => {
    const cb = (typeof options === 'function' ? options : callback) as LookupCallback;
    const all = typeof options === 'object' && options !== null && options.all === true;
    resolve(hostname).then(
      (addresses) => {
        const bad = addresses.find((a) => !isAllowedAddress(a.address, list));
        if (bad) return cb(blocked(bad.address, hostname) as NodeJS.ErrnoException, '');
        const first = addresses[0];
        if (!first) return cb(new OutboundBlockedError(`${hostname} did not resolve`) as NodeJS.ErrnoException, '');
        if (all) cb(null, addresses);
        else cb(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => cb(err, ''),
    );
  };
}
