import { describe, expect, it } from 'vitest';
import { Signer } from './cursor.js';

describe('fleet cursors and public keys', () => {
  const s = new Signer('k1');
  it('reads back its own cursor, refuses another conversation, a forged one and another key', () => {
    const c = s.cursor('flt_a', 'web-1', 42);
    expect(s.readCursor(c, 'flt_a', 'web-1')).toBe(42);
    expect(s.readCursor(c, 'flt_a', 'web-2')).toBeNull();
    expect(s.readCursor(c, 'flt_b', 'web-1')).toBeNull();
    const [body] = c.split('.');
    const forged = `${Buffer.from('flt_a|web-1|7').toString('base64url')}.${c.split('.')[1]}`;
    expect(body).not.toBe(forged.split('.')[0]);
    expect(s.readCursor(forged, 'flt_a', 'web-1')).toBeNull();
    expect(new Signer('k2').readCursor(c, 'flt_a', 'web-1')).toBeNull();
  });
  it('public keys carry their conversation and token generation, and expire', () => {
    const k = s.publicKey({ ownerId: 'acc', fleetAgentId: 'flt_a', groupId: 'web-1', expiresAt: Date.now() + 60_000, generation: 'g1' });
    expect(s.readPublicKey(k)).toMatchObject({ ownerId: 'acc', fleetAgentId: 'flt_a', groupId: 'web-1', generation: 'g1' });
    const old = s.publicKey({ ownerId: 'acc', fleetAgentId: 'flt_a', groupId: 'web-1', expiresAt: Date.now() - 1, generation: 'g1' });
    expect(s.readPublicKey(old)).toBeNull();
    expect(s.readPublicKey(`${k}x`)).toBeNull();
  });
});
