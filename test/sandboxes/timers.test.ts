// The spec's timeout semantics on durable timers: destroy without suspendOnIdle, suspend with it,
// suspend pauses the TTL, activity re-arms the idle clock, hard TTL destroys regardless, extend, and
// sandboxes and their timers survive a restart of nube.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until } from './helpers.js';

let t: SandboxNube;

describe.each(DRIVERS)('%s: sandbox timers', (driver) => {
  beforeAll(async () => {
    t = await startSandboxNube('timers', { NUBE_SANDBOX_DRIVER: driver });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  /** Moves a deadline column into the near future and re-arms the job, as if the TTL had nearly run. */
  async function fastForward(id: string, col: 'expires_at' | 'hard_expires_at', inMs: number) {
    const core = t.nube.services.sandboxes.core;
    await core.repo.update(id, { [col]: Date.now() + inMs });
    await core.clocks.arm((await core.repo.get(id))!);
  }

  it('without suspendOnIdle the sandbox is destroyed when timeoutSeconds elapse', async () => {
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 2 });
    expect(c.body.status).toBe('running');
    // Waits end as soon as the condition holds; the long limits are for a busy machine.
    const gone = await until(() => t.call('GET', `/sandboxes/${c.body.id}`), (r) => r.status === 404, 60_000);
    expect(gone.status).toBe(404);
    expect(await t.nube.services.sandboxes.core.runtime.get(c.body.id.replace('_', '-'))).toBeNull();
  }, 120_000);

  it('with suspendOnIdle it is suspended instead, and a resume brings it back with its files', async () => {
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 2, suspendOnIdle: true });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    // Started (a failed start would keep only its timeout, then go: a 404 below would not say why).
    expect(c.body.status, JSON.stringify(c.body)).toBe('running');
    const id = c.body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/keep.txt', content: 'kept' });
    const s = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status === 'suspended', 60_000);
    expect(s.body).toMatchObject({ status: 'suspended', expiresAt: null });
    const r = await t.call('POST', `/sandboxes/${id}/resume`);
    expect(r.body.sandbox.status).toBe('running');
    expect((await t.call('POST', `/sandboxes/${id}/files/read`, { path: '/root/keep.txt' })).body.content).toBe('kept');
    await t.call('DELETE', `/sandboxes/${id}`);
  }, 120_000);

  it('suspend pauses the TTL; extend pushes the deadline', async () => {
    const created = Date.now();
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 10 });
    const id = c.body.id;
    const e = await t.call('POST', `/sandboxes/${id}/extend`, { extendSeconds: 2 });
    expect(Date.parse(e.body.expiresAt) - Date.parse(c.body.expiresAt)).toBeGreaterThanOrEqual(1900);
    expect((await t.call('POST', `/sandboxes/${id}/suspend`)).body.sandbox.status).toBe('suspended');
    const suspended = Date.now();
    // Longer than the whole 12 s TTL: without the pause it would have been destroyed.
    await new Promise((r) => setTimeout(r, 13_000));
    expect((await t.call('GET', `/sandboxes/${id}`)).body.status).toBe('suspended');
    const resumed = Date.now();
    const r = await t.call('POST', `/sandboxes/${id}/resume`);
    const expiresAt = Date.parse(r.body.sandbox.expiresAt);
    // What was left at suspend (12 s less the time it ran, at most suspended - created) runs again from
    // the resume: bounds from this side's clock, so a slow machine cannot break them.
    expect(expiresAt - resumed).toBeGreaterThan(12_000 - (suspended - created) - 1000);
    expect(expiresAt - Date.now()).toBeLessThanOrEqual(12_000);
    expect((await t.call('POST', `/sandboxes/${id}/extend`, { extendSeconds: 100_000 })).status).toBe(402);
    await t.call('DELETE', `/sandboxes/${id}`);
  }, 120_000);

  it('idle: activity re-arms the idle clock, expiry suspends; hardTtl destroys even when suspended', async () => {
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 600 });
    const id = c.body.id;
    const asked = Date.now();
    const i = await t.call('POST', `/sandboxes/${id}/idle`, { suspendOnIdle: true, idleTtlSeconds: 60, hardTtlSeconds: 120 });
    expect(i.status, JSON.stringify(i.body)).toBe(200);
    expect(i.body.sandbox).toMatchObject({ suspendOnIdle: true, idleTtlSeconds: 60, hardTtlSeconds: 120 });
    // The idle clock runs 60 s from the call, whenever the call was served.
    const first = Date.parse(i.body.sandbox.expiresAt);
    expect(first - Date.now()).toBeLessThanOrEqual(60_000);
    expect(first - asked).toBeGreaterThanOrEqual(59_000);
    await new Promise((r) => setTimeout(r, 1500));
    await t.call('POST', `/sandboxes/${id}/exec`, { command: 'true' });
    const rearmed = Date.parse((await t.call('GET', `/sandboxes/${id}`)).body.expiresAt);
    expect(rearmed - first).toBeGreaterThanOrEqual(1000);

    await fastForward(id, 'expires_at', 300);
    const s = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status === 'suspended', 60_000);
    expect(s.body.status).toBe('suspended');
    await fastForward(id, 'hard_expires_at', 300);
    const gone = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.status === 404, 60_000);
    expect(gone.status).toBe(404);
  }, 180_000);

  it('sandboxes and timers survive a restart of nube', async () => {
    const keep = await t.call('POST', '/sandboxes', { timeoutSeconds: 600 });
    const short = await t.call('POST', '/sandboxes', { timeoutSeconds: 4 });
    await t.call('POST', `/sandboxes/${keep.body.id}/files/write`, { path: '/root/f', content: 'still here' });
    const bg = await t.call('POST', `/sandboxes/${keep.body.id}/bg`, { command: 'exec sleep 300' });
    await t.nube.close();
    // A sandbox the records do not know is destroyed on start.
    const stray = `sbx-stray${Date.now().toString(36)}`;
    await t.nube.services.sandboxes.core.runtime.create({ id: stray, template: 'base' });
    const t2 = await startSandboxNube('timers', { NUBE_OWNER_KEY: t.ownerKey, NUBE_SANDBOX_DRIVER: driver }, t.dataDir);
    Object.assign(t, { ...t2 });
    const r = await t.call('POST', `/sandboxes/${keep.body.id}/exec`, { command: 'cat /root/f' });
    expect(r.body.stdout).toBe('still here');
    const b = await t.call('GET', `/sandboxes/${keep.body.id}/bg/${bg.body.execId}`);
    expect(b.body.state).toBe('running');
    expect(await t.nube.services.sandboxes.core.runtime.get(stray)).toBeNull();
    const gone = await until(() => t.call('GET', `/sandboxes/${short.body.id}`), (x) => x.status === 404, 60_000);
    expect(gone.status).toBe(404);
  }, 180_000);
});
