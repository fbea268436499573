// Sandbox creations a minute: the spec's 10 by default, an operator's own rate (and one per plan) when
// set, one budget whichever surface creates (nube's REST and E2B's control plane). Bodies are invalid
// on purpose: the rate is counted before the body is read, so no sandbox needs to start.
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startNube, type TestNube } from '../helpers/server.js';

async function statuses(t: TestNube, n: number, surface: (i: number) => 'nube' | 'e2b'): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const e2b = surface(i) === 'e2b';
    const r = await fetch(`${t.baseUrl}${e2b ? '/e2b/sandboxes' : '/api/v2/sandboxes'}`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ template: 42, templateID: 42 }),
    });
    out.push(r.status);
  }
  return out;
}

describe('sandbox creation rate', () => {
  it('is 10 a minute by default, on both surfaces together', async () => {
    const t = await startNube();
    try {
      const codes = await statuses(t, 12, (i) => (i % 2 ? 'e2b' : 'nube'));
      expect(codes.slice(0, 10)).toEqual(Array(10).fill(400));
      expect(codes.slice(10)).toEqual([429, 429]);
    } finally {
      await t.close();
    }
  });

  it('follows NUBE_SANDBOX_CREATE_PER_MINUTE, and the setting for the owner plan over it', async () => {
    const t = await startNube({ env: { NUBE_SANDBOX_CREATE_PER_MINUTE: '3', NUBE_SANDBOX_CREATE_PER_MINUTE_TERA: '25', NUBE_OWNER_PLAN: 'tera' } });
    try {
      const codes = await statuses(t, 27, (i) => (i < 13 ? 'e2b' : 'nube'));
      expect(codes.slice(0, 25)).toEqual(Array(25).fill(400));
      expect(codes.slice(25)).toEqual([429, 429]);
    } finally {
      await t.close();
    }
    const byte = await startNube({ env: { NUBE_SANDBOX_CREATE_PER_MINUTE: '3', NUBE_SANDBOX_CREATE_PER_MINUTE_TERA: '25', NUBE_OWNER_PLAN: 'byte' } });
    try {
      expect(await statuses(byte, 4, () => 'nube')).toEqual([400, 400, 400, 429]);
    } finally {
      await byte.close();
    }
  });

  it('refuses a rate that is not a positive whole number', () => {
    expect(() => loadConfig({ NUBE_SANDBOX_CREATE_PER_MINUTE: '0' })).toThrow(/NUBE_SANDBOX_CREATE_PER_MINUTE/);
    expect(() => loadConfig({ NUBE_SANDBOX_CREATE_PER_MINUTE_MEGA: 'lots' })).toThrow(/NUBE_SANDBOX_CREATE_PER_MINUTE_MEGA/);
  });
});
