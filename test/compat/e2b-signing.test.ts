// The real `e2b` SDK against nube: signed file URLs (downloadUrl/uploadUrl with `signature` and
// `signature_expiration`). With E2B_SANDBOX_URL set the URL names no sandbox: the one whose token
// signed it is found. Without it the SDK uses the sandbox's envd host, `49983-<id>.<public host>`,
// which nube serves as envd too. A wrong, expired or other sandbox's signature is a 401.
import { request } from 'node:http';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startNube } from '../helpers/server.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let a: Sandbox;
let b: Sandbox;

/** A request to nube with this Host header (a port host) and no other credential. */
function viaHost(t: SandboxNube, host: string, path: string, method = 'GET', body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: Number(new URL(t.baseUrl).port), path, method, headers: { host } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('e2b SDK: signed file URLs', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-signing');
    [a, b] = await Promise.all([Sandbox.create({ timeoutMs: 300_000 }), Sandbox.create({ timeoutMs: 300_000 })]);
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('downloads and uploads through a signed URL that names no sandbox', async () => {
    await a.files.write('hello.txt', 'from a');
    await b.files.write('hello.txt', 'from b');
    const url = await a.downloadUrl('hello.txt');
    expect(url).toMatch(new RegExp(`^${t.baseUrl}/files\\?`));
    expect(new URL(url).searchParams.get('signature')).toMatch(/^v1_/);
    const got = await fetch(url);
    expect(got.status).toBe(200);
    expect(await got.text()).toBe('from a');
    expect(await (await fetch(await b.downloadUrl('hello.txt', { useSignatureExpiration: 60 }))).text()).toBe('from b');

    const form = new FormData();
    form.append('file', 'uploaded by URL');
    const up = await fetch(await a.uploadUrl('up.txt', { useSignatureExpiration: 60 }), { method: 'POST', body: form });
    expect(up.status).toBe(200);
    expect(await up.json()).toEqual([{ name: 'up.txt', type: 'file', path: '/home/user/up.txt' }]);
    expect(await a.files.read('up.txt')).toBe('uploaded by URL');
    expect((await a.files.getInfo('up.txt')).owner).toBe('user');
    // As root: the user is part of what is signed.
    await a.files.write('secret.txt', 'root only', { user: 'root' });
    expect(await (await fetch(await a.downloadUrl('secret.txt', { user: 'root' }))).text()).toBe('root only');
  });

  it('refuses an expired, altered or unsigned URL with 401', async () => {
    await a.files.write('x.txt', 'x');
    const expired = await fetch(await a.downloadUrl('x.txt', { useSignatureExpiration: -10 }));
    expect(expired.status).toBe(401);
    expect(await expired.json()).toEqual({ code: 401, message: 'signature is already expired' });
    const url = new URL(await a.downloadUrl('x.txt', { useSignatureExpiration: 60 }));
    // Another path, another user or a later expiry under the same signature.
    for (const [k, v] of [['path', 'other.txt'], ['username', 'root'], ['signature_expiration', String(Number(url.searchParams.get('signature_expiration')) + 3600)]]) {
      const forged = new URL(url);
      forged.searchParams.set(k!, v!);
      const r = await fetch(forged);
      expect(r.status).toBe(401);
      expect(await r.json()).toEqual({ code: 401, message: 'invalid signature' });
    }
    const unsigned = new URL(url);
    unsigned.searchParams.set('signature', 'v1_AAAA');
    expect((await fetch(unsigned)).status).toBe(401);
  });

  it("serves envd at the sandbox's envd host: signed URLs there, health, the port URLs of others", async () => {
    const host = a.getHost(49983);
    expect(host).toMatch(new RegExp(`^49983-${a.sandboxId}\\.`));
    const url = new URL(await a.downloadUrl('x.txt', { useSignatureExpiration: 60 }));
    const r = await viaHost(t, host, `${url.pathname}${url.search}`);
    expect(r).toEqual({ status: 200, body: 'x' });
    // The same signature on the other sandbox's envd host opens nothing.
    expect((await viaHost(t, b.getHost(49983), `${url.pathname}${url.search}`)).status).toBe(401);
    // Unsigned: refused, not served by the sandbox.
    expect((await viaHost(t, host, '/files?path=x.txt')).status).toBe(401);
  });
});

describe('signed file URLs: the signer lookup', () => {
  it('is limited per address: a flood of made-up signatures gets 429s', async () => {
    const small = await startNube({ env: { NUBE_RATE_LIMIT_PER_MINUTE: '3' } });
    try {
      const codes: number[] = [];
      for (let i = 0; i < 5; i++) codes.push((await fetch(`${small.baseUrl}/files?path=x&signature=v1_made_up${i}`)).status);
      expect(codes).toEqual([401, 401, 401, 429, 429]);
    } finally {
      await small.close();
    }
  });
});
