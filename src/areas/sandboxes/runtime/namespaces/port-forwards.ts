// Raw ports in the kernel: nftables DNAT from a host port to a port of a sandbox on the bridge, in the
// bridge's own table. Clients on other hosts come through the prerouting hook, clients on this host
// (its own addresses, 127.0.0.1 included) through the output hook; loopback clients are masqueraded
// to the bridge address (the sandbox could not answer 127.0.0.1) and need route_localnet on the bridge.
// The forward chain lets DNATed connections into the bridge (it drops every other new one) and their
// replies out (the sandbox's policy chain would reject a private client address). Every packet such a
// connection sends into the bridge refreshes the sandbox's address in `raw_active` (the idle clock reads it).
import { writeFile } from 'node:fs/promises';
import { isIPv4 } from 'node:net';
import { run } from './proc.js';

export interface PortForward {
  protocol: 'tcp' | 'udp';
  /** The address the public port is on: 0.0.0.0 for every address of the host. */
  bind: string;
  publicPort: number;
  address: string;
  port: number;
}

/** How long a packet keeps a sandbox marked active (the idle clock asks at its deadline). */
export const ACTIVE_SECONDS = 30;

/** Whether DNAT can serve a public port bound there (IPv4 only; a host name or IPv6 keeps the relay). */
export function dnatBindable(bind: string): boolean {
  return isIPv4(bind);
}

export class PortForwards {
  constructor(
    private readonly table: string,
    private readonly bridge: string,
  ) {}

  private get t() {
    return `inet ${this.table}`;
  }

  /** The maps, chains and forward rules, for a table that lacks them (new, or made by an older nube). */
  async ensure(listing: string): Promise<void> {
    await writeFile(`/proc/sys/net/ipv4/conf/${this.bridge}/route_localnet`, '1');
    const b = this.bridge;
    const t = this.t;
    const lines: string[] = [];
    if (!listing.includes('raw_any')) {
      const lookup = [
        'fib daddr type local dnat ip to meta l4proto . th dport map @raw_any',
        'dnat ip to meta l4proto . ip daddr . th dport map @raw_addr',
      ];
      lines.push(
        `add map ${t} raw_any { type inet_proto . inet_service : ipv4_addr . inet_service; }`,
        `add map ${t} raw_addr { type inet_proto . ipv4_addr . inet_service : ipv4_addr . inet_service; }`,
        `add set ${t} raw_active { type ipv4_addr; flags dynamic,timeout; timeout ${ACTIVE_SECONDS}s; }`,
        `add chain ${t} raw_prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
        // route_localnet would let a sandbox address the host's loopback: new connections to it are dropped.
        `add rule ${t} raw_prerouting iifname "${b}" ip daddr 127.0.0.0/8 drop`,
        ...lookup.map((r) => `add rule ${t} raw_prerouting ${r}`),
        `add chain ${t} raw_output { type nat hook output priority -100; policy accept; }`,
        ...lookup.map((r) => `add rule ${t} raw_output ${r}`),
        `add chain ${t} raw_postrouting { type nat hook postrouting priority 100; policy accept; }`,
        `add rule ${t} raw_postrouting oifname "${b}" ip saddr 127.0.0.0/8 ct status dnat masquerade`,
        // Inserted at the head of forward, ahead of its drops: replies first, then new connections in.
        `insert rule ${t} forward iifname "${b}" ct direction reply ct status dnat accept`,
        `insert rule ${t} forward iifname != "${b}" oifname "${b}" ct status dnat accept`,
      );
    }
    if (!listing.includes('raw_seen')) {
      // Postrouting, where the output device is known for local clients too (the output hook still
      // names lo for a connection to 127.0.0.1 that DNAT sent to the bridge).
      lines.push(
        `add chain ${t} raw_seen { type filter hook postrouting priority 0; policy accept; }`,
        `add rule ${t} raw_seen oifname "${b}" ct status dnat update @raw_active { ip daddr }`,
      );
    }
    // A first version of this code counted activity in an output chain that missed local clients.
    if (listing.includes('chain raw_local')) lines.push(`flush chain ${t} raw_local`, `delete chain ${t} raw_local`);
    if (lines.length) await run('nft', ['-f', '-'], { input: `${lines.join('\n')}\n` });
  }

  private element(f: Pick<PortForward, 'protocol' | 'bind' | 'publicPort'>): { map: string; key: string } {
    return f.bind === '0.0.0.0'
      ? { map: 'raw_any', key: `${f.protocol} . ${f.publicPort}` }
      : { map: 'raw_addr', key: `${f.protocol} . ${f.bind} . ${f.publicPort}` };
  }

  /** Idempotent: replaces the element's target (a resumed sandbox may have moved). */
  async add(f: PortForward): Promise<void> {
    const { map, key } = this.element(f);
    await run('nft', ['-f', '-'], {
      input: `delete element ${this.t} ${map} { ${key} }\n`,
      allowFailure: true,
    });
    await run('nft', ['add', 'element', 'inet', this.table, map, `{ ${key} : ${f.address} . ${f.port} }`]);
  }

  async remove(f: Pick<PortForward, 'protocol' | 'bind' | 'publicPort'>): Promise<void> {
    const { map, key } = this.element(f);
    await run('nft', ['delete', 'element', 'inet', this.table, map, `{ ${key} }`], { allowFailure: true });
  }

  /** Whether a forwarded packet reached or left this address in the last ACTIVE_SECONDS. */
  async active(address: string): Promise<boolean> {
    const r = await run('nft', ['get', 'element', 'inet', this.table, 'raw_active', `{ ${address} }`], { allowFailure: true });
    return r.code === 0;
  }
}
