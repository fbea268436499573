import { describe, expect, it } from 'vitest';
import { BadSignature, Expired } from './errors.js';
import { UrlTokenSigner } from './url-token.js';

describe('UrlTokenSigner', () => {
  let now = 1_700_000_000_000;
  const signer = new UrlTokenSigner({ signingKey: 'k'.repeat(32), now: () => now });
  const grant = { method: 'PUT' as const, location: 'EU', key: 'public/o/f', expiresInSeconds: 60 };

  it('round-trips the grant with constraints and a fresh nonce per PUT token', () => {
    const t = signer.sign({ ...grant, contentType: 'image/png', maxBytes: 10, size: 5 });
    const v = signer.verify(t, 'PUT');
    expect(v).toMatchObject({ method: 'PUT', location: 'EU', key: 'public/o/f', contentType: 'image/png', maxBytes: 10, size: 5 });
    expect(v.expiresAt).toBe(now / 1000 + 60);
    expect(v.nonce).toMatch(/^[\w-]{22}$/);
    expect(signer.verify(signer.sign(grant), 'PUT').nonce).not.toBe(v.nonce);
    expect(signer.verify(signer.sign({ ...grant, method: 'GET' }), 'GET').nonce).toBeUndefined();
  });

  it('any change to payload or signature is BadSignature', () => {
    const t = signer.sign(grant);
    const [p, s] = t.split('.');
    const json = Buffer.from(p, 'base64url').toString();
    for (const bad of [
      `${Buffer.from(json.replace('"EU"', '"US"')).toString('base64url')}.${s}`,
      `${Buffer.from(json.replace(/"e":\d+/, '"e":9999999999')).toString('base64url')}.${s}`,
      `${p}.${s.slice(1)}`,
      `${p}.`,
      p,
      `${p}.${s}.x`,
      '',
    ]) {
      expect(() => signer.verify(bad, 'PUT')).toThrow(BadSignature);
    }
    const other = new UrlTokenSigner({ signingKey: 'j'.repeat(32), now: () => now });
    expect(() => other.verify(t, 'PUT')).toThrow(BadSignature);
  });

  it('a token is only good for its method (HEAD rides on GET)', () => {
    expect(() => signer.verify(signer.sign(grant), 'GET')).toThrow(BadSignature);
    const g = signer.sign({ ...grant, method: 'GET' });
    expect(signer.verify(g, 'HEAD').key).toBe('public/o/f');
    expect(() => signer.verify(g, 'PUT')).toThrow(BadSignature);
  });

  it('expires exactly at expiresAt', () => {
    const t = signer.sign(grant);
    now += 59_999;
    expect(signer.verify(t, 'PUT').key).toBe('public/o/f');
    now += 1;
    expect(() => signer.verify(t, 'PUT')).toThrow(Expired);
  });

  it('refuses short keys and non-positive lifetimes', () => {
    expect(() => new UrlTokenSigner({ signingKey: 'short' })).toThrow(/32 bytes/);
    expect(() => signer.sign({ ...grant, expiresInSeconds: 0 })).toThrow(RangeError);
  });
});
