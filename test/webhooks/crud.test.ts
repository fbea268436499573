import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';

const ALLOW = { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' };

describe.each(DIALECTS)('webhooks CRUD (%s)', (dialect) => {
  let t: TestNube;
  let otherKey: string;
  const call = (method: string, path: string, body?: unknown, key?: string) => caller(t)(method, path, body, key);

  beforeAll(async () => {
    t = await startNube({ dialect, env: ALLOW });
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
  });
  afterAll(() => t?.close());

  it('creates a webhook, shows the secret once, lists, gets, patches and deletes it', async () => {
    const created = await call('POST', '/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['file.created'] });
    expect(created.status).toBe(201);
    const w = await json(created);
    expect(w).toMatchObject({
      url: 'http://127.0.0.1:9/hook',
      events: ['file.created'],
      status: 'ACTIVE',
      failureCount: 0,
      lastDeliveryAt: null,
      lastError: null,
    });
    expect(w.id).toMatch(/^wh_/);
    expect(w.secret).toMatch(/^whsec_[A-Za-z0-9]{40}$/);

    const got = await json(await call('GET', `/webhooks/${w.id}`));
    expect(got.secret).toBeUndefined();
    expect(got).toMatchObject({ id: w.id, status: 'ACTIVE', events: ['file.created'] });
    const list = await json(await call('GET', '/webhooks'));
    expect(list.items.map((x: { id: string }) => x.id)).toContain(w.id);
    expect(list.items.every((x: { secret?: string }) => x.secret === undefined)).toBe(true);

    // The secret is stored sealed, never in clear.
    const row = await t.nube.deps.store.db.selectFrom('webhooks').select('secret').where('id', '=', w.id).executeTakeFirstOrThrow();
    expect(row.secret).not.toContain(w.secret);
    expect(t.nube.deps.secretBox.open(row.secret)).toBe(w.secret);

    const patched = await call('PATCH', `/webhooks/${w.id}`, {
      events: ['file.deleted', 'turn.completed'],
      url: 'http://127.0.0.1:10/other',
      status: 'PAUSED',
    });
    expect(patched.status).toBe(200);
    expect(await json(patched)).toMatchObject({
      events: ['file.deleted', 'turn.completed'],
      url: 'http://127.0.0.1:10/other',
      status: 'PAUSED',
    });
    expect((await call('DELETE', `/webhooks/${w.id}`)).status).toBe(200);
    expect((await call('GET', `/webhooks/${w.id}`)).status).toBe(404);
    expect((await call('DELETE', `/webhooks/${w.id}`)).status).toBe(404);
  });

  it.each([
    ['unknown event', { url: 'http://127.0.0.1:9/', events: ['file.exploded'] }],
    ['no events', { url: 'http://127.0.0.1:9/', events: [] }],
    ['repeated events', { url: 'http://127.0.0.1:9/', events: ['file.created', 'file.created'] }],
    ['events not an array', { url: 'http://127.0.0.1:9/', events: 'file.created' }],
    ['missing url', { events: ['file.created'] }],
    ['ftp url', { url: 'ftp://127.0.0.1/', events: ['file.created'] }],
    ['not a url', { url: 'hello', events: ['file.created'] }],
  ])('refuses %s with 400 and issues', async (_name, body) => {
    const r = await call('POST', '/webhooks', body);
    expect(r.status).toBe(400);
    const b = await json(r);
    expect(b.error).toBeTruthy();
    expect(Array.isArray(b.issues) && b.issues.length > 0).toBe(true);
  });

  it('refuses bad PATCH bodies with 400', async () => {
    const w = await json(await call('POST', '/webhooks', { url: 'http://127.0.0.1:9/', events: ['file.created'] }));
    for (const body of [{ status: 'DISABLED' }, { events: ['nope'] }, { url: 'gopher://x/' }, { events: [] }]) {
      expect((await call('PATCH', `/webhooks/${w.id}`, body)).status).toBe(400);
    }
  });

  it("answers 404 for another owner's webhook and does not list it", async () => {
    const w = await json(await call('POST', '/webhooks', { url: 'http://127.0.0.1:9/', events: ['file.created'] }));
    for (const [method, path, body] of [
      ['GET', `/webhooks/${w.id}`],
      ['PATCH', `/webhooks/${w.id}`, { status: 'PAUSED' }],
      ['DELETE', `/webhooks/${w.id}`],
      ['GET', `/webhooks/${w.id}/deliveries`],
      ['POST', `/webhooks/${w.id}/deliveries/dlv_000000000abc/redeliver`],
    ] as const) {
      const r = await call(method, path, body, otherKey);
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    const theirs = await json(await call('GET', '/webhooks', undefined, otherKey));
    expect(theirs.items).toEqual([]);
    expect((await json(await call('GET', `/webhooks/${w.id}`))).status).toBe('ACTIVE');
  });

  it('answers 404 for an unknown delivery and 400 for a bad cursor', async () => {
    const w = await json(await call('POST', '/webhooks', { url: 'http://127.0.0.1:9/', events: ['file.created'] }));
    expect((await call('POST', `/webhooks/${w.id}/deliveries/dlv_nope/redeliver`)).status).toBe(404);
    expect((await call('GET', `/webhooks/${w.id}/deliveries?cursor=garbage`)).status).toBe(400);
    expect((await call('GET', `/webhooks/${w.id}/deliveries?status=lost`)).status).toBe(400);
    expect((await call('GET', `/webhooks/${w.id}/deliveries?limit=0`)).status).toBe(400);
  });
});

describe('webhook URL guard without an allow-list', () => {
  let t: TestNube;
  beforeAll(async () => {
    t = await startNube();
  });
  afterAll(() => t?.close());
  const create = (url: string) =>
    fetch(`${t.baseUrl}/api/v2/webhooks`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url, events: ['file.created'] }),
    });

  it.each([
    'http://127.0.0.1:9/hook',
    'http://localhost:9/hook',
    'http://2130706433/',
    'http://0177.0.0.1/',
    'http://0.0.0.0:9/',
    'http://169.254.169.254/latest/meta-data/',
    'http://10.0.0.1/',
    'http://192.168.1.1/',
    'http://100.64.0.1/',
    'http://[::1]:9/',
    'http://[::ffff:127.0.0.1]/',
    'http://[fd00::1]/',
    'http://[fe80::1]/',
    'http://224.0.0.1/',
  ])('refuses %s with 400 UrlRefused', async (url) => {
    const r = await create(url);
    expect(r.status).toBe(400);
    const b = await json(r);
    expect(b.code).toBe('UrlRefused');
    expect(b.issues[0].path).toEqual(['url']);
  });

  it('refuses a PATCH to a loopback URL, and an unresolvable host, with 400', async () => {
    const ok = await create('http://93.184.216.34/hook');
    expect(ok.status).toBe(201);
    const w = await json(ok);
    const r = await fetch(`${t.baseUrl}/api/v2/webhooks/${w.id}`, {
      method: 'PATCH',
      headers: { ...t.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: 'http://127.0.0.1:8080/' }),
    });
    expect(r.status).toBe(400);
    expect((await json(r)).code).toBe('UrlRefused');
    const bad = await create('http://no-such-host.invalid/hook');
    expect(bad.status).toBe(400);
    expect((await json(bad)).code).toBe('UrlRefused');
  });
});
