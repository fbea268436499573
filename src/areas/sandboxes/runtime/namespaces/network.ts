import { lookup } from 'node:dns/promises';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { isIPv4 } from 'node:net';
import type { NetworkPolicy } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { PROTECTED_RANGES } from '../protected-ranges.js';
import { PortForwards } from './port-forwards.js';
import { takePidLock } from './pid-lock.js';
import { run } from './proc.js';

export interface BridgeConfig {
  name: string;
  /** Host address and prefix, e.g. 10.77.0.1/16; sandboxes get the other addresses of the range. */
  cidr: string;
}

const PROTECTED = PROTECTED_RANGES.map((r) => r.cidr);

const LEASE_ROOT = '/run/nube-net';

function ipToInt(ip: string): number {
  return ip.split('.').reduce((a, p) => a * 256 + Number(p), 0);
}
/** Whether two IPv4 networks share any address. */
function overlaps(a: number, aPrefix: number, b: number, bPrefix: number): boolean {
  const p = Math.min(aPrefix, bPrefix);
  const mask = p === 0 ? 0 : (0xffffffff << (32 - p)) >>> 0;
  return ((a & mask) >>> 0) === ((b & mask) >>> 0);
}

export interface HostAddress {
  ifname: string;
  local: string;
  prefixlen: number;
}

/** Every IPv4 address of the host's interfaces. */
export async function hostAddresses(): Promise<HostAddress[]> {
  const out = JSON.parse((await run('ip', ['-j', '-4', 'addr', 'show'])).stdout) as {
    ifname: string;
    addr_info?: { local: string; prefixlen: number }[];
  }[];
  return out.flatMap((i) => (i.addr_info ?? []).map((a) => ({ ifname: i.ifname, local: a.local, prefixlen: a.prefixlen })));
}

function intToIp(n: number): string {
  return [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
}

export class BridgeNetwork {
  readonly table: string;
  readonly hostIp: string;
  readonly prefix: number;
  /** Raw ports as DNAT rules in this bridge's table. */
  readonly forwards: PortForwards;
  private readonly first: number;
  private readonly size: number;

  constructor(
    readonly bridge: BridgeConfig,
    private readonly resolver: string | null,
    /** Protected ranges the operator admits (NUBE_SANDBOX_PRIVATE_ALLOW): a policy's `allow` may open these. */
    private readonly admitted: readonly string[] = [],
  ) {
    const [ip, prefix] = bridge.cidr.split('/');
    if (!isIPv4(ip) || !prefix) throw new SandboxRuntimeError('InvalidInput', `bad bridge cidr ${bridge.cidr}`);
    this.hostIp = ip;
    this.prefix = Number(prefix);
    this.size = 2 ** (32 - this.prefix);
    this.first = ipToInt(ip) - (ipToInt(ip) % this.size);
    this.table = `nube_${bridge.name.replace(/[^a-zA-Z0-9_]/g, '_')}`;
    this.forwards = new PortForwards(this.table, bridge.name);
  }

  get subnet(): string {
    return `${intToIp(this.first)}/${this.prefix}`;
  }

  /** Addresses of other interfaces inside the bridge's subnet (sandbox traffic to them would go astray). */
  conflicts(addrs: HostAddress[]): HostAddress[] {
    return addrs.filter((a) => a.ifname !== this.bridge.name && overlaps(ipToInt(a.local), a.prefixlen, this.first, this.prefix));
  }

  private leaseDir(): string {
    return `${LEASE_ROOT}/${this.bridge.name}`;
  }

  /** Bridge, forwarding, NAT and the host-protecting rules; once per host (a lock serializes). */
  async ensure(): Promise<void> {
    await mkdir(this.leaseDir(), { recursive: true });
    const lock = `${this.leaseDir()}/.setup.lock`;
    await takePidLock(lock);
    try {
      const name = this.bridge.name;
      const addrs = await hostAddresses();
      const [a] = this.conflicts(addrs);
      if (a) {
        throw new Error(
          `NUBE_SANDBOX_BRIDGE: ${name} ${this.subnet} overlaps ${a.ifname}'s ${a.local}/${a.prefixlen}; choose another subnet`,
        );
      }
      if (!existsSync(`/sys/class/net/${name}`)) {
        await run('ip', ['link', 'add', name, 'type', 'bridge']);
      }
      const mine = addrs.filter((a) => a.ifname === name);
      const ours = (a: HostAddress) => a.local === this.hostIp && a.prefixlen === this.prefix;
      if (mine.some((a) => !ours(a))) {
        // A bridge left by an earlier configuration: its address and its rules name the old subnet.
        // (Only then: a bridge with no address yet is one being set up, whose table must stay.)
        await run('ip', ['addr', 'flush', 'dev', name]);
        await run('nft', ['delete', 'table', 'inet', this.table], { allowFailure: true });
      }
      if (!mine.some(ours)) {
        const added = await run('ip', ['addr', 'add', `${this.hostIp}/${this.prefix}`, 'dev', name], { allowFailure: true });
        if (added.code !== 0 && !/exists/i.test(added.stderr)) throw new Error(`ip addr add ${this.hostIp}/${this.prefix} dev ${name}: ${added.stderr.trim()}`);
      }
      await run('ip', ['link', 'set', name, 'up']);
      await writeFile('/proc/sys/net/ipv4/ip_forward', '1');
      const has = await run('nft', ['list', 'table', 'inet', this.table], { allowFailure: true });
      if (has.code !== 0) await run('nft', ['-f', '-'], { input: this.baseRules() });
      else await this.ensureHostServices(has.stdout);
      await this.forwards.ensure(has.code === 0 ? has.stdout : '');
    } finally {
      await rm(lock, { recursive: true, force: true });
    }
  }

  private baseRules(): string {
    const b = this.bridge.name;
    return `table inet ${this.table} {
  map sandboxes { type ipv4_addr : verdict; }
  set host_services { type inet_service; }
  chain input {
    type filter hook input priority -10; policy accept;
    iifname "${b}" ct state established,related accept
    ${this.hostServicesRule()}
    iifname "${b}" reject with icmpx type admin-prohibited
  }
  chain forward {
    type filter hook forward priority -10; policy accept;
    oifname "${b}" ct state established,related accept
    oifname "${b}" drop
    iifname "${b}" ip saddr vmap @sandboxes
    iifname "${b}" drop
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    ip saddr ${this.subnet} oifname != "${b}" masquerade
  }
}
`;
  }

  /** Host ports every sandbox may reach at the bridge address (the LLM gateway); the rest is rejected. */
  private hostServicesRule(): string {
    return `iifname "${this.bridge.name}" ip daddr ${this.hostIp} tcp dport @host_services accept`;
  }

  /**
   * A table made before host services existed (or by another nube version on a shared bridge) lacks the
   * set or its rule: add them, the rule ahead of the reject. `add set` is a no-op when the set exists.
   */
  private async ensureHostServices(listing?: string): Promise<void> {
    const text = listing ?? (await run('nft', ['list', 'chain', 'inet', this.table, 'input'], { allowFailure: true })).stdout;
    if (text.includes('@host_services')) return;
    await run('nft', ['-f', '-'], {
      input: `add set inet ${this.table} host_services { type inet_service; }\ninsert rule inet ${this.table} input ${this.hostServicesRule()}\n`,
    });
  }

  /** Idempotent: also puts back the set and rule if something rebuilt the table meanwhile. */
  async openHostPort(port: number): Promise<void> {
    await this.ensureHostServices();
    await run('nft', ['add', 'element', 'inet', this.table, 'host_services', `{ ${port} }`]);
  }

  async closeHostPort(port: number): Promise<void> {
    await run('nft', ['delete', 'element', 'inet', this.table, 'host_services', `{ ${port} }`], { allowFailure: true });
  }

  /** Where the next lease search starts: after the last address given (indexes are not reused at once). */
  private nextLease = 2;

  /**
   * Claim an address index; leases live in /run so every nube instance on the host sees them. A lease is
   * a mkdir (atomic between processes) plus its owner; synchronous, as each is a few microseconds on a
   * tmpfs and a create's path should not queue on the thread pool for them.
   */
  async lease(owner: string, wanted?: number): Promise<number> {
    mkdirSync(this.leaseDir(), { recursive: true });
    const hostIdx = ipToInt(this.hostIp) - this.first;
    const tryClaim = (idx: number) => {
      const dir = `${this.leaseDir()}/${idx}`;
      try {
        mkdirSync(dir);
        writeFileSync(`${dir}/owner`, owner);
        return true;
      } catch {
        try {
          return readFileSync(`${dir}/owner`, 'utf8') === owner;
        } catch {
          return false;
        }
      }
    };
    if (wanted !== undefined && tryClaim(wanted)) return wanted;
    const count = this.size - 3;
    for (let n = 0; n < count; n++) {
      const idx = 2 + ((this.nextLease - 2 + n) % count);
      if (idx !== hostIdx && tryClaim(idx)) {
        this.nextLease = idx + 1;
        return idx;
      }
    }
    throw new SandboxRuntimeError('Internal', `no free address on ${this.bridge.name}`);
  }

  async release(idx: number): Promise<void> {
    await rm(`${this.leaseDir()}/${idx}`, { recursive: true, force: true });
  }

  address(idx: number): string {
    return intToIp(this.first + idx);
  }

  names(idx: number) {
    return { veth: `nbv${this.bridge.name.slice(-3)}${idx.toString(36)}`, chain: `sb_${idx}` };
  }

  /**
   * The launch request's network fields (helper/launch.c): the netns, the veth pair into the bridge
   * (a fixed MAC per address: after a resume, new veth, the host's neighbour entry stays right instead
   * of black-holing traffic until it expires, ~30 s), addresses, route, sysctls by netlink and /proc in
   * the helper, and the sandbox's policy chain as an nft script the helper runs alongside.
   */
  async attachFields(netns: string, idx: number, policy: NetworkPolicy): Promise<string[]> {
    return [
      `n:${netns}`,
      `v:${this.names(idx).veth}`,
      `b:${this.bridge.name}`,
      `h:${macFor(idx)}`,
      `A:${this.address(idx)}/${this.prefix}`,
      `g:${this.hostIp}`,
      `f:${await this.policyScript(idx, policy, true)}`,
    ];
  }

  async detach(netns: string, idx: number): Promise<void> {
    const { veth, chain } = this.names(idx);
    const addr = this.address(idx);
    await run('nft', ['-f', '-'], {
      input: `delete element inet ${this.table} sandboxes { ${addr} }\n`,
      allowFailure: true,
    });
    await run('nft', ['delete', 'chain', 'inet', this.table, chain], { allowFailure: true });
    if (existsSync(`/sys/class/net/${veth}`)) await run('ip', ['link', 'del', veth], { allowFailure: true });
    if (existsSync(`/run/netns/${netns}`)) await run('ip', ['netns', 'del', netns], { allowFailure: true });
  }

  /** Replace the sandbox's chain atomically (one nft transaction), so policy changes apply live. */
  async applyPolicy(idx: number, policy: NetworkPolicy): Promise<void> {
    await run('nft', ['-f', '-'], { input: await this.policyScript(idx, policy, false) });
  }

  /** The nft transaction that (re)writes a sandbox's chain; `create` also maps its address to it. */
  async policyScript(idx: number, policy: NetworkPolicy, create: boolean): Promise<string> {
    const { chain } = this.names(idx);
    const allow = await resolveTargets(policy.allow ?? []);
    const deny = await resolveTargets(policy.deny ?? []);
    const t = `inet ${this.table}`;
    const lines = [`add chain ${t} ${chain}`, `flush chain ${t} ${chain}`];
    // The host is never reachable (the input chain rejects it too); the subnet holds other sandboxes.
    lines.push(`add rule ${t} ${chain} ip daddr { ${this.hostIp}, ${this.subnet} } reject with icmpx type admin-prohibited`);
    // Order: the resolver (port 53 only) is always reachable, so an allow-list (`deny 0.0.0.0/0` +
    // `allow` domains) still resolves names. Then the protected ranges (protected-ranges.ts) are closed
    // whatever the policy says, except where the operator admitted a range and the policy opens it
    // (both sets must match). Then allow beats deny, and deny beats the default accept.
    const reject = 'reject with icmpx type admin-prohibited';
    if (this.resolver) {
      lines.push(`add rule ${t} ${chain} ip daddr ${this.resolver} meta l4proto { tcp, udp } th dport 53 accept`);
    }
    if (allow.length && this.admitted.length) {
      lines.push(`add rule ${t} ${chain} ip daddr { ${this.admitted.join(', ')} } ip daddr { ${allow.join(', ')} } accept`);
    }
    lines.push(`add rule ${t} ${chain} ip daddr { ${PROTECTED.join(', ')} } ${reject}`);
    if (allow.length) lines.push(`add rule ${t} ${chain} ip daddr { ${allow.join(', ')} } accept`);
    if (deny.length) lines.push(`add rule ${t} ${chain} ip daddr { ${deny.join(', ')} } ${reject}`);
    lines.push(`add rule ${t} ${chain} accept`);
    if (create) lines.push(`add element ${t} sandboxes { ${this.address(idx)} : jump ${chain} }`);
    return `${lines.join('\n')}\n`;
  }

  async listPolicy(idx: number): Promise<string> {
    return (await run('nft', ['list', 'chain', 'inet', this.table, this.names(idx).chain])).stdout;
  }

  async hasNetns(netns: string): Promise<boolean> {
    return existsSync(`/run/netns/${netns}`);
  }
}

/**
 * CIDRs pass through; domains are resolved to their IPv4 addresses now (at apply time): a domain
 * whose addresses change later needs the policy applied again.
 */
export async function resolveTargets(items: string[]): Promise<string[]> {
  const out = new Set<string>();
  for (const raw of items) {
    const item = raw.trim();
    const [ip, bits] = item.split('/');
    if (isIPv4(ip)) {
      if (bits !== undefined && !(/^\d+$/.test(bits) && Number(bits) <= 32)) {
        throw new SandboxRuntimeError('InvalidInput', `bad CIDR ${item}`);
      }
      out.add(bits === undefined ? ip : `${ip}/${bits}`);
      continue;
    }
    if (!/^(?=.{1,253}$)([a-zA-Z0-9_]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9-]{1,63}\.?$/.test(item)) {
      throw new SandboxRuntimeError('InvalidInput', `not a CIDR or domain: ${item}`);
    }
    const addrs = await lookup(item, { all: true, family: 4 }).catch(() => []);
    if (addrs.length === 0) throw new SandboxRuntimeError('InvalidInput', `cannot resolve ${item}`);
    for (const a of addrs) out.add(a.address);
  }
  return [...out];
}

/** The first host resolver a sandbox can reach through NAT (a loopback resolver is not reachable). */
export async function hostResolver(): Promise<string | null> {
  const text = await readFile('/etc/resolv.conf', 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    const m = /^\s*nameserver\s+(\S+)/.exec(line);
    if (m && isIPv4(m[1]) && !m[1].startsWith('127.')) return m[1];
  }
  return null;
}

/** Locally administered unicast MAC derived from the lease index. */
export function macFor(idx: number): string {
  const b = [(idx >>> 24) & 255, (idx >>> 16) & 255, (idx >>> 8) & 255, idx & 255];
  return ['02', '4e', ...b.map((x) => x.toString(16).padStart(2, '0'))].join(':');
}
