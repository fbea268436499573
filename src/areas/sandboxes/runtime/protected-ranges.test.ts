import { describe, expect, it } from 'vitest';
import { policyRefusals } from './protected-ranges.js';

const rules = {
  bridgeSubnet: '10.77.0.1/16',
  admitted: ['10.20.0.0/16', '169.254.169.254/32'],
  resolve: async (name: string) => ({ 'db.internal': ['10.0.3.4'], 'public.test': ['93.184.216.34'], 'mixed.test': ['93.184.216.34', '192.168.1.9'] })[name] ?? [],
};

describe('protected ranges', () => {
  it('refuses what touches a protected range beyond what the operator admits, naming why', async () => {
    const got = await policyRefusals(
      ['1.1.1.1', '8.8.8.0/24', '10.0.0.0/8', '10.20.1.0/24', '10.20.0.0/15', '169.254.169.254', '169.254.170.2', '172.16.5.5', '100.64.0.1', '127.0.0.1', '224.0.0.251', '0.0.0.0/0', '10.77.3.9', 'db.internal', 'public.test', 'mixed.test', 'unknown.test', 'fe80::1'],
      rules,
    );
    expect(got.map((r) => r.entry)).toEqual(['10.0.0.0/8', '10.20.0.0/15', '169.254.170.2', '172.16.5.5', '100.64.0.1', '127.0.0.1', '224.0.0.251', '0.0.0.0/0', '10.77.3.9', 'db.internal', 'mixed.test']);
    const why = Object.fromEntries(got.map((r) => [r.entry, r.reason]));
    expect(why['169.254.170.2']).toBe('169.254.170.2 includes 169.254.0.0/16, link-local (the cloud metadata service)');
    expect(why['10.77.3.9']).toBe('10.77.3.9 includes the sandbox network 10.77.0.0/16 (the host and the other sandboxes)');
    expect(why['mixed.test']).toBe('mixed.test resolves to 192.168.1.9, 192.168.0.0/16, a private network');
    expect(got.find((r) => r.entry === 'db.internal')!.index).toBe(13);
  });

  it('never lets an admitted range open the sandbox network', async () => {
    const got = await policyRefusals(['10.77.0.5'], { ...rules, admitted: ['10.0.0.0/8'] });
    expect(got[0]!.reason).toContain('sandbox network');
  });
});
