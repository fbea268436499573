import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import {
  assertPublicUrl,
  isAllowedAddress,
  isPublicAddress,
  OutboundBlockedError,
  parseAllowList,
  safeLookup,
} from './outbound-address.js';

const NOT_PUBLIC = [
  '127.0.0.1',
  '127.255.255.254',
  '0.0.0.0',
  '0.1.2.3',
  '10.1.2.3',
  '172.16.0.1',
  '172.31.255.255',
  '192.168.1.1',
  '169.254.169.254',
  '100.64.0.1',
  '100.127.255.255',
  '224.0.0.1',
  '239.255.255.250',
  '255.255.255.255',
  '240.0.0.1',
  '198.18.0.1',
  '192.0.2.1',
  '::',
  '::1',
  '0:0:0:0:0:0:0:1',
  '::ffff:127.0.0.1',
  '::ffff:7f00:1',
  '0:0:0:0:0:ffff:7f00:0001',
  '::ffff:169.254.169.254',
  '::ffff:10.0.0.1',
  '::127.0.0.1',
  'fd00::1',
  'fdff:ffff::1',
  'fc00::1',
  'fe80::1',
  'fe80::1%eth0',
  'ff02::1',
  '64:ff9b::7f00:1',
  '2002:7f00:1::1',
  '2001:db8::1',
  '2001:0:4136:e378:8000:63bf:3fff:fdd2',
  '100::1',
  'not-an-ip',
  '',
];

const PUBLIC = [
  '1.1.1.1',
  '8.8.8.8',
  '93.184.216.34',
  '172.15.255.255',
  '172.32.0.0',
  '100.63.255.255',
  '100.128.0.0',
  '169.253.255.255',
  '2606:4700:4700::1111',
  '2a00:1450:4001:80b::200e',
  '::ffff:8.8.8.8',
];

describe('isPublicAddress', () => {
  it.each(NOT_PUBLIC)('refuses %s', (ip) => expect(isPublicAddress(ip)).toBe(false));
  it.each(PUBLIC)('accepts %s', (ip) => expect(isPublicAddress(ip)).toBe(true));
});

describe('allow-list', () => {
  it('admits only what it names, mapped forms included', () => {
    const allow = parseAllowList(['127.0.0.1/32', '10.0.0.0/8', 'fd00::/8']);
    expect(isAllowedAddress('127.0.0.1', allow)).toBe(true);
    expect(isAllowedAddress('::ffff:127.0.0.1', allow)).toBe(true);
    expect(isAllowedAddress('127.0.0.2', allow)).toBe(false);
    expect(isAllowedAddress('10.200.3.4', allow)).toBe(true);
    expect(isAllowedAddress('fd12:3456::1', allow)).toBe(true);
    expect(isAllowedAddress('fe80::1', allow)).toBe(false);
    expect(isAllowedAddress('169.254.169.254', allow)).toBe(false);
    expect(isAllowedAddress('8.8.8.8', allow)).toBe(true);
  });
  it('accepts bare addresses and mapped CIDRs, refuses garbage', () => {
    expect(isAllowedAddress('192.168.5.5', parseAllowList(['192.168.5.5']))).toBe(true);
    expect(isAllowedAddress('192.168.5.6', parseAllowList(['192.168.5.5']))).toBe(false);
    expect(isAllowedAddress('127.0.0.9', parseAllowList(['::ffff:127.0.0.0/104']))).toBe(true);
    expect(isAllowedAddress('::1', parseAllowList(['::1/128']))).toBe(true);
    expect(() => parseAllowList(['nope'])).toThrow();
    expect(() => parseAllowList(['10.0.0.0/33'])).toThrow();
    expect(() => parseAllowList(['10.0.0.0/x'])).toThrow();
  });
});

const fakeDns = (map: Record<string, string[]>) => async (host: string) => {
  const list = map[host];
  if (!list) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return list.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

describe('assertPublicUrl', () => {
  const refuse = async (url: string, allow: string[] = [], resolve = fakeDns({})) =>
    expect(assertPublicUrl(url, allow, { resolve })).rejects.toBeInstanceOf(OutboundBlockedError);

  it.each([
    'http://127.0.0.1/',
    'http://2130706433/',
    'http://0177.0.0.1/',
    'http://0x7f.1/',
    'http://127.1/',
    'http://0.0.0.0:8080/',
    'http://0/',
    'http://169.254.169.254/latest/meta-data/',
    'http://[::1]/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:a9fe:a9fe]/',
    'http://[fd00::1]/',
    'http://[fe80::1]/',
    'ftp://example.com/',
    'file:///etc/passwd',
    'gopher://example.com/',
    'not a url',
  ])('refuses %s', (url) => refuse(url));

  it('refuses names resolving to private addresses, and a name with any private answer', async () => {
    const dns = fakeDns({
      localhost: ['127.0.0.1', '::1'],
      'rebind.example': ['10.0.0.5'],
      'mixed.example': ['93.184.216.34', '192.168.0.1'],
      'v6.example': ['fd00::5'],
    });
    await refuse('http://localhost:3000/', [], dns);
    await refuse('https://rebind.example/', [], dns);
    await refuse('https://mixed.example/', [], dns);
    await refuse('https://v6.example/', [], dns);
    await expect(assertPublicUrl('https://nowhere.example/', [], { resolve: dns })).rejects.toMatchObject({
      code: 'ENOTFOUND',
    });
  });

  it('accepts public hosts and what the allow-list admits', async () => {
    const dns = fakeDns({ 'hooks.example': ['93.184.216.34'], localhost: ['127.0.0.1', '::1'] });
    await expect(assertPublicUrl('https://hooks.example/x', [], { resolve: dns })).resolves.toMatchObject({
      addresses: [{ address: '93.184.216.34' }],
    });
    await expect(assertPublicUrl('http://8.8.8.8/', [])).resolves.toBeTruthy();
    await expect(assertPublicUrl('http://127.0.0.1:9/', ['127.0.0.1/32'])).resolves.toBeTruthy();
    await expect(assertPublicUrl('http://2130706433/', ['127.0.0.1/32'])).resolves.toBeTruthy();
    await refuse('http://localhost/', ['127.0.0.1/32'], dns); // ::1 is not admitted
    await expect(
      assertPublicUrl('http://localhost/', ['127.0.0.1/32', '::1/128'], { resolve: dns }),
    ).resolves.toBeTruthy();
  });

  it('with dns: false checks literals only', async () => {
    await expect(assertPublicUrl('http://whatever.invalid/', [], { dns: false })).resolves.toMatchObject({
      addresses: [],
    });
    await refuse('http://127.0.0.1/', []);
  });
});

describe('safeLookup on a real socket', () => {
  it('connects to an allowed address and refuses one a name resolves to when not allowed', async () => {
    const server = createServer((_req, res) => res.end('hi'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    const get = (allow: string[]) =>
      new Promise<string>((resolve, reject) => {
        const lookup = safeLookup(allow, fakeDns({ 'app.test': ['127.0.0.1'] }));
        const req = request({ host: 'app.test', port, path: '/', lookup: lookup as never }, (res) => {
          let body = '';
          res.on('data', (c) => (body += c)).on('end', () => resolve(body));
        });
        req.on('error', reject).end();
      });
    try {
      await expect(get([])).rejects.toBeInstanceOf(OutboundBlockedError);
      await expect(get(['127.0.0.1/32'])).resolves.toBe('hi');
    } finally {
      server.close();
    }
  });
});
