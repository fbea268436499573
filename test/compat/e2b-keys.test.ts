// Keys in E2B's format: `POST /account/keys {format: "e2b"}` makes an `e2b_<hex>` key that E2B's SDK
// takes as it is and that has the rights of any owner key, on nube's API and E2B's alike.
import { AuthenticationError, Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNube, type TestNube } from '../helpers/server.js';

let t: TestNube;

async function call(key: string, method: string, path: string, body?: unknown) {
  const r = await fetch(`${t.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, body: (await r.json().catch(() => null)) as Record<string, unknown> };
}

describe('E2B-format keys', () => {
  beforeAll(async () => {
    t = await startNube();
    process.env.E2B_API_URL = `${t.baseUrl}/e2b`;
    process.env.E2B_SANDBOX_URL = t.baseUrl;
    // The SDK's own key check stays on: it refuses anything but `e2b_` and hex.
    delete process.env.E2B_VALIDATE_API_KEY;
  });
  afterAll(async () => {
    await t.close();
  });

  it('are made on request and work on both APIs with the same owner', async () => {
    const made = await call(t.ownerKey, 'POST', '/api/v2/account/keys', { name: 'for e2b', format: 'e2b' });
    expect(made.status).toBe(201);
    const key = made.body.secret as string;
    expect(key).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(made.body.preview).toBe(`${key.slice(0, 17)}…`);

    const mine = await call(t.ownerKey, 'GET', '/api/v2/account');
    const viaE2bKey = await call(key, 'GET', '/api/v2/account');
    expect(viaE2bKey.status).toBe(200);
    expect(viaE2bKey.body.id).toBe(mine.body.id);
    expect(await Sandbox.list({ apiKey: key }).nextItems()).toEqual([]);

    // The default format is still nube's own.
    const plain = await call(t.ownerKey, 'POST', '/api/v2/account/keys', {});
    expect(plain.body.secret).toMatch(/^nube_sk_live_/);
    expect(await call(t.ownerKey, 'POST', '/api/v2/account/keys', { format: 'aws' })).toMatchObject({ status: 400 });

    // Revoked: refused on both surfaces.
    expect((await call(t.ownerKey, 'DELETE', `/api/v2/account/keys/${made.body.id}`)).status).toBe(200);
    expect((await call(key, 'GET', '/api/v2/account')).status).toBe(401);
    await expect(Sandbox.list({ apiKey: key }).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('an e2b-shaped key nube never made opens nothing', async () => {
    const forged = `e2b_${'0'.repeat(40)}`;
    expect((await call(forged, 'GET', '/api/v2/account')).status).toBe(401);
    await expect(Sandbox.list({ apiKey: forged }).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
  });
});
