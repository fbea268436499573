import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { NODE_ORIGIN_HEADER, ProxyTrust } from './request-origin.js';

const req = (remoteAddress: string, headers: Record<string, string | string[]>, encrypted = false) =>
  ({ socket: { remoteAddress, encrypted }, headers }) as unknown as IncomingMessage;

describe('where a browser sent a request', () => {
  const trust = new ProxyTrust(['127.0.0.1', '10.0.0.0/8']);
  const forwarded = { host: 'internal:7070', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'console.example.com' };

  it('believes X-Forwarded-Proto and -Host from a trusted proxy only (the last hop it appended)', () => {
    expect(trust.originOf(req('10.1.2.3', forwarded), false)).toEqual({ secure: true, host: 'console.example.com' });
    expect(trust.originOf(req('::ffff:127.0.0.1', { ...forwarded, 'x-forwarded-proto': 'http, https' }), false).secure).toBe(true);
    expect(trust.originOf(req('192.0.2.9', forwarded), false)).toEqual({ secure: false, host: 'internal:7070' });
    expect(new ProxyTrust().originOf(req('127.0.0.1', forwarded), false)).toEqual({ secure: false, host: 'internal:7070' });
  });

  it('a TLS socket is HTTPS; a relaying node tells what it saw, believed only when relayed', () => {
    expect(trust.originOf(req('192.0.2.9', { host: 'a:1' }, true), false)).toEqual({ secure: true, host: 'a:1' });
    const told = { host: 'node-b:7070', [NODE_ORIGIN_HEADER]: 'https://console.example.com' };
    expect(trust.originOf(req('192.0.2.9', told), true)).toEqual({ secure: true, host: 'console.example.com' });
    expect(trust.originOf(req('192.0.2.9', told), false)).toEqual({ secure: false, host: 'node-b:7070' });
    expect(ProxyTrust.describe({ secure: true, host: 'console.example.com' })).toBe('https://console.example.com');
  });
});
