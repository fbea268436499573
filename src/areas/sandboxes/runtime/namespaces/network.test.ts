// The host bridge set-up: a subnet that overlaps another interface is refused with the setting's name,
// and a bridge left with an earlier configuration's address is moved to the configured one.
import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { BridgeNetwork } from './network.js';

const sh = (...args: string[]) => execFileSync(args[0]!, args.slice(1), { stdio: 'pipe' }).toString();
const quiet = (...args: string[]) => {
  try {
    sh(...args);
  } catch {}
};
const root = process.getuid?.() === 0;

describe.skipIf(!root)('sandbox host bridge', () => {
  afterAll(() => {
    quiet('ip', 'link', 'del', 'nubetd0');
    quiet('ip', 'link', 'del', 'nubets0');
    quiet('nft', 'delete', 'table', 'inet', 'nube_nubets0');
    quiet('nft', 'delete', 'table', 'inet', 'nube_nubetx0');
    quiet('ip', 'link', 'del', 'nubetc0');
    quiet('nft', 'delete', 'table', 'inet', 'nube_nubetc0');
  });

  it('refuses a subnet that overlaps another interface, naming NUBE_SANDBOX_BRIDGE', async () => {
    quiet('ip', 'link', 'del', 'nubetd0');
    sh('ip', 'link', 'add', 'nubetd0', 'type', 'bridge');
    sh('ip', 'addr', 'add', '10.97.3.1/24', 'dev', 'nubetd0');
    const net = new BridgeNetwork({ name: 'nubetx0', cidr: '10.97.0.1/16' }, null);
    await expect(net.ensure()).rejects.toThrow(/NUBE_SANDBOX_BRIDGE: nubetx0 10\.97\.0\.0\/16 overlaps nubetd0's 10\.97\.3\.1\/24/);
    expect(sh('ip', '-br', 'link')).not.toMatch(/nubetx0/);
  });

  it('moves a bridge left with another address to the configured one and rebuilds its rules', async () => {
    quiet('ip', 'link', 'del', 'nubets0');
    await new BridgeNetwork({ name: 'nubets0', cidr: '10.96.0.1/16' }, null).ensure();
    expect(sh('nft', 'list', 'table', 'inet', 'nube_nubets0')).toContain('10.96.0.0/16');
    await new BridgeNetwork({ name: 'nubets0', cidr: '10.95.0.1/16' }, null).ensure();
    const addr = sh('ip', '-br', '-4', 'addr', 'show', 'dev', 'nubets0');
    expect(addr).toContain('10.95.0.1/16');
    expect(addr).not.toContain('10.96.0.1');
    const rules = sh('nft', 'list', 'table', 'inet', 'nube_nubets0');
    expect(rules).toContain('10.95.0.0/16');
    expect(rules).not.toContain('10.96.0.0/16');
  });

  it('many set-ups at once on a fresh bridge all succeed, and a bridge with no address yet keeps its table', async () => {
    quiet('ip', 'link', 'del', 'nubetc0');
    quiet('nft', 'delete', 'table', 'inet', 'nube_nubetc0');
    const bridge = { name: 'nubetc0', cidr: '10.94.0.1/16' };
    // As at the start of a test run or of several nubes on one host: each its own BridgeNetwork.
    await Promise.all(Array.from({ length: 8 }, () => new BridgeNetwork(bridge, null).ensure()));
    const opened = new BridgeNetwork(bridge, null);
    await opened.openHostPort(7999);
    // A bridge being set up by another process (no address yet) is not an old configuration: its
    // table, and the host port opened in it, stay.
    sh('ip', 'addr', 'flush', 'dev', 'nubetc0');
    await new BridgeNetwork(bridge, null).ensure();
    expect(sh('ip', '-br', '-4', 'addr', 'show', 'dev', 'nubetc0')).toContain('10.94.0.1/16');
    expect(sh('nft', 'list', 'set', 'inet', 'nube_nubetc0', 'host_services')).toContain('7999');
  });
});
