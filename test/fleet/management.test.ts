// Managing the fleet on SQLite and PostgreSQL: fleet agents with their MESSAGE tokens, configuration
// groups, client credentials listing the fleet (`pools`), public read keys, and the refusals (400 with
// issues, 401, 403 for another fleet agent's token, 404 for another owner's resources).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { callJson, startNube, type TestNube } from '../helpers/server.js';

const GROUP = 'web-0b7c6f0e-8d1a-4a55-9a55-5b9b8f1d2c3e';

describe.each(DIALECTS)('fleet: management (%s)', (dialect) => {
  let t: TestNube;
  let otherKey: string;
  const call = (method: string, path: string, body?: unknown, key?: string) =>
    callJson(t.baseUrl, method, path, body, key === '' ? {} : { authorization: `Bearer ${key ?? t.ownerKey}` });

  beforeAll(async () => {
    t = await startNube({ dialect });
    otherKey = (await t.nube.services.account.createAccount({ name: 'other', plan: 'mega' })).secret;
  });
  afterAll(() => t?.close());

  it('creates, gets, updates and deletes a fleet agent with its MESSAGE token', async () => {
    const c = await call('POST', '/fleet-agents', { name: 'soporte', instructions: 'Sé breve.', capacity: 3 });
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ name: 'soporte', instructions: 'Sé breve.', capacity: 3, channels: ['web'], configGroupIds: [], model: null });
    expect(c.body.id).toMatch(/^flt_/);
    expect(c.body.token).toMatch(/^flt_tk_[A-Za-z0-9]{40}$/);
    const got = await call('GET', `/fleet-agents/${c.body.id}`);
    expect(got.body.token).toBe(c.body.token);
    const up = await call('PATCH', `/fleet-agents/${c.body.id}`, { name: 'ventas', capacity: 1 });
    expect(up.body).toMatchObject({ name: 'ventas', capacity: 1, token: c.body.token });
    const rotated = await call('PATCH', `/fleet-agents/${c.body.id}`, { rotateToken: true });
    expect(rotated.body.token).not.toBe(c.body.token);
    // The old token no longer authenticates.
    const old = await call('GET', `/fleet-agents/${c.body.id}/messages?groupId=${GROUP}`, undefined, c.body.token);
    expect(old.status).toBe(401);
    const fresh = await call('GET', `/fleet-agents/${c.body.id}/messages?groupId=${GROUP}`, undefined, rotated.body.token);
    expect(fresh.status).toBe(200);
    expect(fresh.body).toEqual({ items: [], cursor: expect.any(String), hasMore: false, gap: false });
    expect((await call('DELETE', `/fleet-agents/${c.body.id}`)).status).toBe(200);
    expect((await call('GET', `/fleet-agents/${c.body.id}`)).status).toBe(404);
  });

  it('keeps the token sealed at rest (not in clear in the store)', async () => {
    const c = await call('POST', '/fleet-agents', { name: 'sealed' });
    const row = await t.nube.deps.store.db.selectFrom('fleet_agents').selectAll().where('id', '=', c.body.id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(c.body.token);
  });

  it('refuses bad input with 400 and issues', async () => {
    for (const body of [{}, { name: '' }, { name: 'x', capacity: 0 }, { name: 'x', channels: ['fax'] }, { name: 'x', capacity: 100000 }, { name: 'x', configGroupIds: ['cfg_nope'] }]) {
      const r = await call('POST', '/fleet-agents', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.issues?.length, JSON.stringify(body)).toBeGreaterThan(0);
    }
  });

  it('manages configuration groups; a fleet agent may list them; a listed group cannot be deleted', async () => {
    const g = await call('POST', '/fleet-config-groups', {
      name: 'tienda',
      prompt: 'Vendes zapatos.',
      mcpServers: [{ name: 'crm', type: 'http', url: 'https://crm.example.com/mcp', headers: { authorization: 'Bearer s3cr3t-crm' } }],
    });
    expect(g.status).toBe(200);
    expect(g.body.id).toMatch(/^cfg_/);
    expect(g.body.mcpServers[0].headers.authorization).toBe('Bearer s3cr3t-crm');
    const row = await t.nube.deps.store.db.selectFrom('fleet_config_groups').selectAll().where('id', '=', g.body.id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain('s3cr3t-crm');
    const a = await call('POST', '/fleet-agents', { name: 'con grupo', configGroupIds: [g.body.id] });
    expect(a.body.configGroupIds).toEqual([g.body.id]);
    const list = await call('GET', '/fleet-config-groups');
    expect(list.body.configGroups.map((x: { id: string }) => x.id)).toContain(g.body.id);
    const up = await call('PATCH', `/fleet-config-groups/${g.body.id}`, { prompt: 'Vendes botas.' });
    expect(up.body.prompt).toBe('Vendes botas.');
    const busy = await call('DELETE', `/fleet-config-groups/${g.body.id}`);
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ code: 'ConfigGroupInUse', fleetAgentIds: [a.body.id] });
    await call('PATCH', `/fleet-agents/${a.body.id}`, { configGroupIds: [] });
    expect((await call('DELETE', `/fleet-config-groups/${g.body.id}`)).status).toBe(200);
    // Another owner's group is absent.
    const mine = await call('POST', '/fleet-config-groups', { name: 'privado' });
    expect((await call('GET', `/fleet-config-groups/${mine.body.id}`, undefined, otherKey)).status).toBe(404);
    const foreign = await call('POST', '/fleet-agents', { name: 'x', configGroupIds: [mine.body.id] }, otherKey);
    expect(foreign.status).toBe(400);
  });

  it('a client credential lists the fleet agents with their tokens under pools; revoked, it is refused', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'listado' });
    const cc = await call('POST', '/fleet-client-credentials', { name: 'web app' });
    expect(cc.body.credential).toMatch(/^nube_cc_[A-Za-z0-9]{40}$/);
    const pools = await call('GET', '/fleet-agents', undefined, cc.body.credential);
    expect(pools.status).toBe(200);
    expect(pools.body.pools.find((p: { id: string }) => p.id === a.body.id)).toMatchObject({ token: a.body.token, name: 'listado' });
    // Another owner's client credential sees only that owner's fleet.
    const otherCc = await call('POST', '/fleet-client-credentials', {}, otherKey);
    expect((await call('GET', '/fleet-agents', undefined, otherCc.body.credential)).body.pools).toEqual([]);
    // A client credential manages nothing.
    expect((await call('POST', '/fleet-agents', { name: 'no' }, cc.body.credential)).status).toBe(403);
    const listed = await call('GET', '/fleet-client-credentials');
    expect(listed.body.clientCredentials.find((c: { id: string }) => c.id === cc.body.id)).toMatchObject({ credential: null, name: 'web app' });
    expect((await call('DELETE', `/fleet-client-credentials/${cc.body.id}`)).status).toBe(200);
    expect((await call('GET', '/fleet-agents', undefined, cc.body.credential)).status).toBe(401);
    expect((await call('GET', '/fleet-agents', undefined, '')).status).toBe(401);
  });

  it('tokens address their own fleet agent only (403); another owner gets 404; malformed groupId is 400', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'a' });
    const b = await call('POST', '/fleet-agents', { name: 'b' });
    const cross = await call('POST', `/fleet-agents/${b.body.id}/message`, { groupId: GROUP, text: 'hola', configGroupId: 'x' }, a.body.token);
    expect(cross.status).toBe(403);
    expect((await call('GET', `/fleet-agents/${b.body.id}/messages?groupId=${GROUP}`, undefined, a.body.token)).status).toBe(403);
    expect((await call('GET', `/fleet-agents/${a.body.id}`, undefined, otherKey)).status).toBe(404);
    expect((await call('POST', `/fleet-agents/${a.body.id}/message`, { groupId: 'web-123', text: 'hola' }, a.body.token)).status).toBe(400);
    expect((await call('POST', `/fleet-agents/${a.body.id}/message`, { groupId: GROUP, text: 'hola' })).status).toBe(403);
    expect((await call('POST', `/fleet-agents/${a.body.id}/message`, { groupId: GROUP, text: 'hola' }, 'flt_tk_nope')).status).toBe(401);
  });

  it('public keys read one conversation, expire, and cannot send', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'pk' });
    const k = await call('POST', `/fleet-agents/${a.body.id}/public-keys`, { groupId: GROUP }, a.body.token);
    expect(k.status).toBe(200);
    expect(k.body.key).toMatch(/^flt_pk_/);
    const read = await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${GROUP}`, undefined, k.body.key);
    expect(read.status).toBe(200);
    const other = 'web-11111111-2222-4333-8444-555555555555';
    expect((await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${other}`, undefined, k.body.key)).status).toBe(403);
    expect((await call('POST', `/fleet-agents/${a.body.id}/message`, { groupId: GROUP, text: 'x' }, k.body.key)).status).toBe(403);
    // A tampered key is not a credential.
    const tampered = `${k.body.key.slice(0, -2)}xx`;
    expect((await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${GROUP}`, undefined, tampered)).status).toBe(401);
    const short = await call('POST', `/fleet-agents/${a.body.id}/public-keys`, { groupId: GROUP, ttlSeconds: 30 });
    expect(short.status).toBe(200);
    expect((await call('POST', `/fleet-agents/${a.body.id}/public-keys`, { groupId: 'bad' })).status).toBe(400);
  });

  it('public keys end with their token (rotated) and with their fleet agent (deleted), not only at expiry', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'pk-gen' });
    const read = (key: string) => call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${GROUP}`, undefined, key);
    const k1 = (await call('POST', `/fleet-agents/${a.body.id}/public-keys`, { groupId: GROUP, ttlSeconds: 86_400 }, a.body.token)).body.key;
    expect((await read(k1)).status).toBe(200);
    const rotated = await call('PATCH', `/fleet-agents/${a.body.id}`, { rotateToken: true });
    expect((await read(k1)).status).toBe(401);
    const k2 = (await call('POST', `/fleet-agents/${a.body.id}/public-keys`, { groupId: GROUP, ttlSeconds: 86_400 }, rotated.body.token)).body.key;
    expect((await read(k2)).status).toBe(200);
    expect((await call('DELETE', `/fleet-agents/${a.body.id}`)).status).toBe(200);
    expect((await read(k2)).status).toBe(401);
  });

  it('the MESSAGE token reads web conversations only; the owner reads any', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'chan' });
    expect((await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${GROUP}`, undefined, a.body.token)).status).toBe(200);
    for (const g of ['tg-123456789', 'web-1', 'x']) {
      const r = await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${g}`, undefined, a.body.token);
      expect(r.status, g).toBe(403);
      expect(r.body.code).toBe('CredentialNotAllowed');
    }
    expect((await call('GET', `/fleet-agents/${a.body.id}/conversations/tg-123456789/messages`)).status).toBe(200);
    expect((await call('GET', `/fleet-agents/${a.body.id}/conversations/tg-123456789/messages`, undefined, a.body.token)).status).toBe(403);
    expect((await call('GET', `/fleet-agents/${a.body.id}/conversations/tg-1/messages`, undefined, otherKey)).status).toBe(404);
  });

  it('refuses a cursor that is not one of this conversation', async () => {
    const a = await call('POST', '/fleet-agents', { name: 'cur' });
    const r = await call('GET', `/fleet-agents/${a.body.id}/messages?groupId=${GROUP}&since=abc.def`, undefined, a.body.token);
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('InvalidCursor');
  });
});
