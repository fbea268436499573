// What a sandbox never reaches, whatever its owner's network policy says: the host's own ranges, private
// networks (in a cloud: the PostgreSQL, Redis and S3 behind nube), CGNAT, link-local (the instance
// metadata service at 169.254.169.254), multicast and reserved space, and the sandbox network itself
// (the host and the other sandboxes). The operator may admit ranges a policy can then open
// (NUBE_SANDBOX_PRIVATE_ALLOW); the sandbox network can never be admitted. Every driver enforces this
// list in its own filter (namespaces and gVisor: the bridge's nftables chain), and the API refuses a
// policy asking for more, naming the entries (policyRefusals).
import { lookup } from 'node:dns/promises';
import { isIPv4 } from 'node:net';
import { cidrsOverlap, cidrWithin } from '../../../platform/outbound-address.js';

export const PROTECTED_RANGES: readonly { cidr: string; what: string }[] = [
  { cidr: '0.0.0.0/8', what: '"this network" (0.0.0.0 reaches the host itself)' },
  { cidr: '10.0.0.0/8', what: 'a private network' },
  { cidr: '100.64.0.0/10', what: 'carrier-grade NAT space' },
  { cidr: '127.0.0.0/8', what: 'loopback' },
  { cidr: '169.254.0.0/16', what: 'link-local (the cloud metadata service)' },
  { cidr: '172.16.0.0/12', what: 'a private network' },
  { cidr: '192.168.0.0/16', what: 'a private network' },
  { cidr: '224.0.0.0/4', what: 'multicast' },
  { cidr: '240.0.0.0/4', what: 'reserved space' },
];

/** An IPv4 address or CIDR (`a.b.c.d`, `a.b.c.d/n`): what the nftables rules hold. */
export function isIPv4Range(text: string): boolean {
  const [ip = '', bits, extra] = text.trim().split('/');
  return isIPv4(ip) && extra === undefined && (bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= 32));
}

export interface PolicyRefusal {
  index: number;
  entry: string;
  reason: string;
}

export interface RangeRules {
  /** The sandbox network (`10.77.0.0/16`): never reachable, never admitted. */
  bridgeSubnet: string;
  /** Ranges the operator admits (NUBE_SANDBOX_PRIVATE_ALLOW). */
  admitted: readonly string[];
  /** Resolves a domain to its IPv4 addresses (default: the host's resolver). */
  resolve?: (name: string) => Promise<string[]>;
}

const systemResolve = async (name: string) => (await lookup(name, { all: true, family: 4 })).map((a) => a.address);

/** `10.77.0.1/16` -> `10.77.0.0/16`. */
function networkOf(cidr: string): string {
  const [ip = '', bits = '32'] = cidr.split('/');
  const n = Number(bits);
  const base = (ip.split('.').reduce((a, p) => a * 256 + Number(p), 0) & (n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0)) >>> 0;
  return `${[24, 16, 8, 0].map((s) => (base >>> s) & 255).join('.')}/${n}`;
}

/** Why `target` (an address or range) is out of reach, or null when a policy may open it. */
function refusal(target: string, rules: RangeRules): string | null {
  if (cidrsOverlap(target, rules.bridgeSubnet)) return `the sandbox network ${networkOf(rules.bridgeSubnet)} (the host and the other sandboxes)`;
  if (rules.admitted.some((a) => cidrWithin(target, a))) return null;
  const hit = PROTECTED_RANGES.find((p) => cidrsOverlap(target, p.cidr));
  return hit ? `${hit.cidr}, ${hit.what}` : null;
}

/**
 * The entries of an `allowOut` list a sandbox may not be opened to: a range that touches a protected
 * one (beyond what the operator admits), or a domain resolving to such an address. Entries that are
 * neither IPv4 CIDRs nor resolvable names are left to the driver's own validation.
 */
export async function policyRefusals(entries: readonly string[], rules: RangeRules): Promise<PolicyRefusal[]> {
  const resolve = rules.resolve ?? systemResolve;
  const out: PolicyRefusal[] = [];
  for (const [index, raw] of entries.entries()) {
    const entry = raw.trim();
    if (isIPv4Range(entry)) {
      const why = refusal(entry, rules);
      if (why) out.push({ index, entry, reason: `${entry} includes ${why}` });
      continue;
    }
    if (entry.includes('/') || entry.includes(':') || /^[\d.]+$/.test(entry)) continue;
    const addrs = await resolve(entry).catch(() => [] as string[]);
    const bad = addrs.map((a) => [a, refusal(a, rules)] as const).find(([, why]) => why);
    if (bad) out.push({ index, entry, reason: `${entry} resolves to ${bad[0]}, ${bad[1]}` });
  }
  return out;
}

/** A network-policy body (`internet`, `allowOut`, `denyOut`) in the driver's terms: `internet: false` denies all that allowOut does not punch through. */
export function driverPolicy(b: { internet?: boolean; allowOut?: string[]; denyOut?: string[] }): {
  allow: string[];
  deny: string[];
} {
  return { allow: b.allowOut ?? [], deny: [...(b.denyOut ?? []), ...(b.internet === false ? ['0.0.0.0/0'] : [])] };
}
