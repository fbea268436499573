// Plans and payment: a Byte account's one box is a promoted sandbox (same id, same files, no expiry);
// the next machine answers a checkout URL; the built-in checkout page takes the operator's
// confirmation, creates the machine and delivers payment.paid to the account's webhooks.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { type MachineNube, OPERATOR_KEY, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitRunning } from './helpers.js';

describe.each(DIALECTS)('%s: machine plans and checkout', (dialect) => {
  let t: MachineNube;
  let byteKey: string;
  let receiver: Receiver;

  beforeAll(async () => {
    t = await startMachineNube('checkout', dialect);
    byteKey = (await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' })).secret;
    receiver = await startReceiver();
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await receiver.close();
    await stopMachineNube(t);
  }, 120_000);

  it('promotes a sandbox into the plan’s one box, keeping its id and files; it stops expiring', async () => {
    const s = await t.call('POST', '/sandboxes', { timeoutSeconds: 300 }, byteKey);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const w = await t.call('POST', `/sandboxes/${s.body.id}/files/write`, { path: '/root/keep.txt', content: 'kept' }, byteKey);
    expect(w.status).toBe(200);
    const c = await t.call('POST', '/machines', { tier: 'micro', fromSandboxId: s.body.id }, byteKey);
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.sandboxId).toBe(s.body.id);
    await waitRunning(t, c.body.id, byteKey);
    const g = await t.call('GET', `/sandboxes/${s.body.id}`, undefined, byteKey);
    expect(g.body).toMatchObject({ status: 'running', expiresAt: null });
    const r = await t.call('POST', `/sandboxes/${s.body.id}/files/read`, { path: '/root/keep.txt' }, byteKey);
    expect(r.body.content).toBe('kept');
    // Promoting it again, or someone else's sandbox, is refused.
    expect((await t.call('POST', '/machines', { tier: 'micro', fromSandboxId: s.body.id }, byteKey)).status).toBe(409);
    expect((await t.call('POST', '/machines', { tier: 'micro', fromSandboxId: s.body.id })).status).toBe(404);
  }, 120_000);

  it('answers a checkout URL once the boxes are used up; the operator confirms; payment.paid is delivered', async () => {
    const hook = await t.call('POST', '/webhooks', { url: receiver.url, events: ['payment.paid'] }, byteKey);
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    const c = await t.call('POST', '/machines', { tier: 'nano', name: 'paid-box' }, byteKey);
    expect(c.status).toBe(200);
    expect(Object.keys(c.body)).toEqual(['checkoutUrl']);
    const url = new URL(c.body.checkoutUrl);
    expect(url.pathname).toMatch(/^\/checkout\/[0-9A-Za-z]{40}$/);
    const page = await fetch(`${t.baseUrl}${url.pathname}`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('$59.00 MXN');
    expect(html).toContain('Machine nano (shared CPU), one month');
    expect((await fetch(`${t.baseUrl}/checkout/${'x'.repeat(40)}`)).status).toBe(404);
    const confirm = (operatorKey?: string) =>
      fetch(`${t.baseUrl}${url.pathname}/confirm`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ operatorKey }),
      });
    expect((await confirm('wrong-key-wrong-key-wrong')).status).toBe(403);
    expect((await confirm()).status).toBe(403);
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(1);
    const ok = await confirm(OPERATOR_KEY);
    expect(ok.status).toBe(200);
    const paid = (await ok.json()) as { machineId: string; alreadyPaid: boolean };
    expect(paid.alreadyPaid).toBe(false);
    const m = await waitRunning(t, paid.machineId, byteKey);
    expect(m).toMatchObject({ name: 'paid-box', tier: 'nano', monthlyMxn: 59 });
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(2);
    // Paying twice creates nothing more.
    expect(await (await confirm(OPERATOR_KEY)).json()).toMatchObject({ machineId: paid.machineId, alreadyPaid: true });
    const [got] = await receiver.waitFor(1, 30_000);
    const event = JSON.parse(got!.raw);
    expect(event).toMatchObject({ event: 'payment.paid', data: { amountMxn: 59, currency: 'MXN', kind: 'create', provider: 'builtin' } });
    expect((await fetch(`${t.baseUrl}${url.pathname}`).then((r) => r.text()))).toContain(paid.machineId);
    // The owner's boxes are untouched by the other account's.
    expect((await t.call('GET', '/machines')).body.machines).toEqual([]);
  }, 180_000);

  it("the checkout token reaches its order's page and confirmation only (credential reach table)", async () => {
    const c = await t.call('POST', '/machines', { tier: 'nano', name: 'reach-box' }, byteKey);
    expect(Object.keys(c.body)).toEqual(['checkoutUrl']);
    const path = new URL(c.body.checkoutUrl).pathname;
    const token = path.split('/').pop()!;
    const page = await (await fetch(`${t.baseUrl}${path}`)).text();
    expect(page).toContain('$59.00 MXN');
    // Nothing of the account: every registry operation refuses it, as a bearer and as ?token=, and MCP.
    const { operations } = await import('../../src/areas/index.js');
    const wrong: string[] = [];
    for (const op of operations.filter((o) => !o.websocket)) {
      const path = op.path.replace(/\{[A-Za-z0-9_]+\}/g, 'x0');
      for (const [url, headers] of [
        [`${t.baseUrl}/api/v2${path}`, { authorization: `Bearer ${token}` }],
        [`${t.baseUrl}/api/v2${path}?token=${token}`, {}],
      ] as const) {
        const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
        const r = await fetch(url, { method: op.method, headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) }, body });
        if (r.status !== 401) wrong.push(`${op.id}: ${r.status}`);
      }
    }
    expect(wrong).toEqual([]);
    const mcp = await fetch(`${t.baseUrl}/api/mcp`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
    expect(mcp.status).toBe(401);
    // Another order's page is not its to see, nor is a confirmation without the operator key.
    expect((await fetch(`${t.baseUrl}/checkout/${token.slice(0, -1)}${token.endsWith('a') ? 'b' : 'a'}`)).status).toBe(404);
    const refused = await fetch(`${t.baseUrl}${path}/confirm`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(refused.status).toBe(403);
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(2);
  }, 120_000);
});
