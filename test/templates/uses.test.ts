// An owner's template by name beyond POST /sandboxes: a machine's box made from it, and a derived
// template (template-snapshot) of a sandbox of it, image and Dockerfile templates both; while either
// stands on it the template cannot be deleted (409 TemplateInUse), and once they are gone it can.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube } from '../sandboxes/helpers.js';
import { busyboxLayer, dropTemplates, pushImage, type RunningRegistry, startRegistry, waitBuilt } from './registry.js';

describe.each(DRIVERS)('%s: templates used by machines and derived templates', (driver) => {
  let reg: RunningRegistry;
  let t: SandboxNube;

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(reg.host, 'test/bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }], { Env: ['PATH=/bin'] });
    t = await startSandboxNube(
      'tpluses',
      { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin, NUBE_SANDBOX_CREATE_PER_MINUTE: '100' },
      undefined,
      { templates: [] },
    );
  }, 600_000);

  afterAll(async () => {
    for (const m of (await t?.call('GET', '/machines'))?.body?.machines ?? []) await t.call('DELETE', `/machines/${m.id}`);
    for (const s of (await t?.call('GET', '/sandboxes'))?.body?.sandboxes ?? []) await t.call('DELETE', `/sandboxes/${s.id}`);
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
  }, 120_000);

  it("a machine's box from the owner's template by name; the template is refused delete while the machine stands", async () => {
    const c = await t.call('POST', '/templates', { name: 'mbox', fromImage: `${reg.host}/test/bb:v1`, env: { FROM_TPL: 'yes' } });
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    const m = await t.call('POST', '/machines', { tier: 'nano', name: 'on-tpl', template: 'mbox' });
    expect(m.status, JSON.stringify(m.body)).toBe(200);
    expect(m.body.template).toBe('mbox');
    const r = await t.call('POST', `/sandboxes/${m.body.sandboxId}/exec`, { command: 'echo "$FROM_TPL"; readlink /bin/sh' });
    expect(r.body).toMatchObject({ stdout: 'yes\nbusybox\n', exitCode: 0 });
    const del = await t.call('DELETE', '/templates/mbox');
    expect(del.status).toBe(409);
    expect(del.body.code).toBe('TemplateInUse');
    expect((await t.call('DELETE', `/machines/${m.body.id}`)).status).toBe(200);
    // The machine's box goes with it.
    for (let i = 0; i < 50 && (await t.call('DELETE', '/templates/mbox')).status === 409; i++) await new Promise((res) => setTimeout(res, 200));
    expect((await t.call('GET', '/templates/mbox')).status).toBe(404);
  }, 300_000);

  it.each(['image', 'dockerfile'] as const)(
    'a derived template of a sandbox of a %s template: created from by key, and the template is refused delete while it stands',
    async (kind) => {
      const name = `derive-${kind}`;
      const c = await t.call(
        'POST',
        '/templates',
        kind === 'image'
          ? { name, fromImage: `${reg.host}/test/bb:v1` }
          : { name, dockerfile: `FROM ${reg.host}/test/bb:v1\nRUN echo layer > /layer.txt` },
      );
      expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
      const s = await t.call('POST', '/sandboxes', { template: name });
      expect(s.status, JSON.stringify(s.body)).toBe(200);
      await t.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'echo deps > /deps.txt' });
      const d = await t.call('POST', `/sandboxes/${s.body.id}/template-snapshot`, { key: name, hash: 'v1' });
      expect(d.status, JSON.stringify(d.body)).toBe(200);
      expect(d.body).toMatchObject({ key: name, hash: 'v1', stale: false });
      expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);

      const child = await t.call('POST', '/sandboxes', { templateKey: name, templateHash: 'v1' });
      expect(child.status, JSON.stringify(child.body)).toBe(200);
      const r = await t.call('POST', `/sandboxes/${child.body.id}/exec`, {
        command: kind === 'image' ? 'cat /deps.txt' : 'cat /layer.txt /deps.txt',
      });
      expect(r.body).toMatchObject({ stdout: kind === 'image' ? 'deps\n' : 'layer\ndeps\n', exitCode: 0 });
      expect((await t.call('DELETE', `/sandboxes/${child.body.id}`)).status).toBe(200);

      const del = await t.call('DELETE', `/templates/${name}`);
      expect(del.status, JSON.stringify(del.body)).toBe(409);
      expect(del.body.code).toBe('TemplateInUse');
      expect((await t.call('GET', `/templates/${name}`)).body.status).toBe('ready');
      expect((await t.call('DELETE', `/template-snapshots/${d.body.id}`)).status).toBe(200);
      expect((await t.call('DELETE', `/templates/${name}`)).status).toBe(200);
    },
    300_000,
  );
});
