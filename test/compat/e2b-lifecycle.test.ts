// The real `e2b` SDK against nube: sandbox lifecycle, getHost, credentials.
import { AuthenticationError, Sandbox, SandboxNotFoundError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { getUrl } from '../machines/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;

describe('e2b SDK: sandbox lifecycle', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-lifecycle');
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('creates, gets info, lists, sets the timeout and kills', async () => {
    const sbx = await Sandbox.create('base', { metadata: { purpose: 'test' }, timeoutMs: 120_000, envs: { FROM_CREATE: 'yes' } });
    expect(sbx.sandboxId).toMatch(/^sbx-/);
    expect(await sbx.isRunning()).toBe(true);
    expect((await sbx.commands.run('echo $FROM_CREATE')).stdout).toBe('yes\n');
    const info = await sbx.getInfo();
    expect(info).toMatchObject({ sandboxId: sbx.sandboxId, templateId: 'base', metadata: { purpose: 'test' }, state: 'running' });
    expect(info.endAt.getTime() - Date.now()).toBeLessThanOrEqual(120_000);
    await sbx.setTimeout(600_000);
    const later = await sbx.getInfo();
    expect(later.endAt.getTime() - Date.now()).toBeGreaterThan(500_000);
    // The nube API sees the same sandbox, with its E2B marker.
    const own = await t.call('GET', `/sandboxes/${sbx.sandboxId.replace('-', '_')}`);
    expect(own.body.metadata).toMatchObject({ purpose: 'test', 'nube.e2b': 'true' });

    const page = await Sandbox.list({ query: { metadata: { purpose: 'test' } } }).nextItems();
    expect(page.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
    expect(await Sandbox.list({ query: { metadata: { purpose: 'other' } } }).nextItems()).toEqual([]);

    expect(await sbx.kill()).toBe(true);
    expect(await Sandbox.kill(sbx.sandboxId)).toBe(false);
    await expect(Sandbox.getInfo(sbx.sandboxId)).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it('pauses and resumes through connect, keeping files', async () => {
    const sbx = await Sandbox.create();
    await sbx.files.write('/root/kept.txt', 'still here');
    expect(await sbx.pause()).toBe(true);
    expect((await sbx.getInfo()).state).toBe('paused');
    expect((await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).map((s) => s.sandboxId)).toContain(sbx.sandboxId);
    const again = await Sandbox.connect(sbx.sandboxId);
    expect((await again.getInfo()).state).toBe('running');
    expect(await again.files.read('/root/kept.txt')).toBe('still here');
    await again.kill();
  });

  it('a pause keeps running processes and memory (keepMemory: false keeps the files only)', async () => {
    const sbx = await Sandbox.create();
    const sleeper = await sbx.commands.run('sleep 3600', { background: true });
    await sbx.files.write('/home/user/site/index.html', 'still serving');
    await sbx.commands.run('cd /home/user/site && python3 -m http.server 8001', { background: true });
    const host = sbx.getHost(8001);
    const served = async () => {
      let r = { status: 0, body: '' };
      for (let i = 0; i < 50 && r.status !== 200; i++) {
        r = await getUrl(t, `http://${host}`, '/index.html');
        if (r.status !== 200) await new Promise((res) => setTimeout(res, 100));
      }
      return r;
    };
    expect(await served()).toEqual({ status: 200, body: 'still serving' });
    expect(await sbx.pause()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    const own = await t.call('GET', `/sandboxes/${sbx.sandboxId.replace('-', '_')}`);
    expect(own.body).toMatchObject({ status: 'suspended', memoryKept: true });
    await sbx.connect();
    // The same processes, not restarted ones: the pid is listed and connectable, the server answers.
    expect((await sbx.commands.list()).map((p) => p.pid)).toContain(sleeper.pid);
    expect((await sbx.commands.connect(sleeper.pid)).pid).toBe(sleeper.pid);
    expect(await served()).toEqual({ status: 200, body: 'still serving' });
    // A filesystem-only pause ends them.
    await sbx.pause({ keepMemory: false });
    expect((await t.call('GET', `/sandboxes/${sbx.sandboxId.replace('-', '_')}`)).body.memoryKept).toBe(false);
    await sbx.connect();
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(sleeper.pid);
    expect((await sbx.commands.run("ps -eo args= | grep -c '^sleep 3600' || true")).stdout.trim()).toBe('0');
    await sbx.kill();
  });

  it('getHost(port) reaches a server inside the sandbox', async () => {
    const sbx = await Sandbox.create();
    await sbx.files.write('/home/user/site/index.html', 'served from the sandbox');
    await sbx.commands.run('cd /home/user/site && python3 -m http.server 8000', { background: true });
    const host = sbx.getHost(8000);
    expect(host).toMatch(new RegExp(`^8000-${sbx.sandboxId}\\.`));
    let r = { status: 0, body: '' };
    for (let i = 0; i < 50; i++) {
      r = await getUrl(t, `http://${host}`, '/index.html');
      if (r.status === 200) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(r).toEqual({ status: 200, body: 'served from the sandbox' });
    await sbx.kill();
  });

  it("another owner's sandbox is not found; a bad key is refused", async () => {
    const sbx = await Sandbox.create();
    const acct = await t.nube.services.account.createAccount({ name: 'intruder', plan: 'byte' });
    const apiKey = acct.secret;
    await expect(Sandbox.connect(sbx.sandboxId, { apiKey })).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.getInfo(sbx.sandboxId, { apiKey })).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.kill(sbx.sandboxId, { apiKey })).toBe(false);
    expect(await Sandbox.list({ apiKey }).nextItems()).toEqual([]);
    await expect(Sandbox.create({ apiKey: 'nube_sk_live_wrongwrongwrongwrongwrongwrong12' })).rejects.toBeInstanceOf(AuthenticationError);
    // The in-sandbox surface wants the sandbox's own token: none, or another sandbox's, is refused.
    const other = await Sandbox.create({ apiKey });
    const res = await fetch(`${t.baseUrl}/files?path=/etc/hostname`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': (other as unknown as { envdAccessToken: string }).envdAccessToken },
    });
    expect(res.status).toBe(401);
    const bare = await fetch(`${t.baseUrl}/files?path=/etc/hostname`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
    expect(bare.status).toBe(401);
    expect((await sbx.files.read('/etc/hostname')).trim()).toMatch(/^sbx/);
    await other.kill();
    await sbx.kill();
  });

  it('answers what it does not do with 501 and E2B error bodies', async () => {
    const r = await fetch(`${t.baseUrl}/e2b/templates`, { headers: { 'X-API-KEY': t.ownerKey } });
    expect(r.status).toBe(501);
    expect(await r.json()).toMatchObject({ code: 501 });
    const bad = await fetch(`${t.baseUrl}/e2b/v2/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-KEY': t.ownerKey, 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 5 }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ code: 400, issues: [{ path: ['body', 'templateID'] }] });
  });
});
