// Host services (the LLM gateway's port): the bridge's table has the set and its accept rule, and
// opening a port puts them back when the table was rebuilt without them (an older table, or another
// nube version on a shared bridge), which once left a running gateway unreachable from sandboxes.
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
const TABLE = 'nube_nubeth0';

describe.skipIf(!root)('sandbox host services', () => {
  afterAll(() => {
    quiet('ip', 'link', 'del', 'nubeth0');
    quiet('nft', 'delete', 'table', 'inet', TABLE);
  });

  it('opens a host port with an accept rule ahead of the reject, and restores both after a rebuild', async () => {
    const net = new BridgeNetwork({ name: 'nubeth0', cidr: '10.93.0.1/16' }, null);
    await net.ensure();
    await net.openHostPort(7171);
    const input = () => sh('nft', 'list', 'chain', 'inet', TABLE, 'input');
    const lines = input().split('\n').map((l) => l.trim());
    const accept = lines.findIndex((l) => l.includes('tcp dport @host_services accept'));
    const reject = lines.findIndex((l) => l.includes('reject'));
    expect(accept).toBeGreaterThan(-1);
    expect(accept).toBeLessThan(reject);
    expect(sh('nft', 'list', 'set', 'inet', TABLE, 'host_services')).toContain('7171');

    // The table rebuilt by code that knows nothing of host services: the port is closed...
    sh('nft', 'delete', 'table', 'inet', TABLE);
    execFileSync('nft', ['-f', '-'], {
      input: `table inet ${TABLE} {\n  chain input {\n    type filter hook input priority -10; policy accept;\n    iifname "nubeth0" ct state established,related accept\n    iifname "nubeth0" reject with icmpx type admin-prohibited\n  }\n}\n`,
    });
    expect(input()).not.toContain('@host_services');
    // ... and opening it again (the gateway does so every 10 s at most) puts the set and the rule back.
    await net.openHostPort(7171);
    expect(input()).toContain('@host_services');
    expect(sh('nft', 'list', 'set', 'inet', TABLE, 'host_services')).toContain('7171');
    await net.closeHostPort(7171);
    expect(sh('nft', 'list', 'set', 'inet', TABLE, 'host_services')).not.toContain('7171');
  });
});
