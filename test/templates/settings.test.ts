// A template's settings beyond its files, end to end through the API with the warm pool on: `user`
// (and an image's USER) for commands and files, an exec's own `user` (also on nube's Debian `base`),
// `diskMB` as each sandbox's disk quota, a Dockerfile's build args (ARG defaults overridden, part of
// the step cache) and build network, and a delete right after the template's sandboxes go (its pool
// drained and not refilled). Images: busybox (static) with user `app`, in a registry on loopback.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube, until } from '../sandboxes/helpers.js';
import { PLANS } from '../../src/platform/plans.js';
import {
  busyboxLayer,
  dropTemplates,
  pushImage,
  type RunningRegistry,
  startRegistry,
  waitBuilt,
} from './registry.js';

const logsOf = async (t: SandboxNube, id: string) =>
  await (await fetch(`${t.baseUrl}/api/v2/templates/${id}/build-logs`, { headers: t.auth })).text();

describe.each(DRIVERS)('%s: template user, disk, build args and pool', (driver) => {
  let reg: RunningRegistry;
  let t: SandboxNube;
  let image: string;
  let asApp: string;

  beforeAll(async () => {
    reg = await startRegistry();
    const layer = { tar: await busyboxLayer(), compression: 'gzip' as const };
    pushImage(reg.host, 'test/bb', 'v1', [layer], { Env: ['PATH=/bin'] });
    pushImage(reg.host, 'test/bb-app', 'v1', [layer], { Env: ['PATH=/bin'], User: 'app' });
    image = `${reg.host}/test/bb:v1`;
    asApp = `${reg.host}/test/bb-app:v1`;
    t = await startSandboxNube(
      'tplsettings',
      {
        NUBE_SANDBOX_DRIVER: driver,
        NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin,
        NUBE_SANDBOX_POOL: '1',
        // This file creates more sandboxes a minute than an owner's default allows.
        NUBE_SANDBOX_CREATE_PER_MINUTE: '100',
      },
      undefined,
      { templates: ['base'] },
    );
  }, 600_000);

  afterAll(async () => {
    for (const s of (await t?.call('GET', '/sandboxes'))?.body?.sandboxes ?? [])
      await t.call('DELETE', `/sandboxes/${s.id}`);
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
  }, 120_000);

  const exec = async (id: string, body: Record<string, unknown>) => {
    const r = await t.call('POST', `/sandboxes/${id}/exec`, body);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body;
  };

  it("a template's user runs commands and background processes and owns the files the API writes; an exec's user overrides it", async () => {
    const c = await t.call('POST', '/templates', { name: 'as-app', fromImage: image, user: 'app' });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.user).toBe('app');
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    const s = await t.call('POST', '/sandboxes', { template: 'as-app' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const id = s.body.id;

    const r = await exec(id, {
      command: 'id -u; id -g; pwd; echo "$HOME $USER"; echo made > mine; stat -c "%u" mine',
    });
    expect(r.stdout).toBe('1000\n1000\n/home/app\n/home/app app\n1000\n');
    // Root's files stay out of its reach.
    expect((await exec(id, { command: 'echo x > /root/no' })).exitCode).not.toBe(0);
    // The call's own user wins: root, a uid, uid:gid.
    expect((await exec(id, { command: 'id -u; pwd', user: 'root' })).stdout).toBe('0\n/root\n');
    expect((await exec(id, { command: 'id -u; id -g', user: '1000:0' })).stdout).toBe('1000\n0\n');
    expect((await exec(id, { command: 'id -u; id -g', user: '4242' })).stdout).toBe('4242\n0\n');
    // An unknown user or group is a 400 with issues; a malformed one too.
    for (const user of ['nobody-here', 'app:nogroup', 'a b']) {
      const bad = await t.call('POST', `/sandboxes/${id}/exec`, { command: 'true', user });
      expect(bad.status, user).toBe(400);
      expect(bad.body.issues[0].path.at(-1)).toBe('user');
    }
    // A user added inside is found at once.
    await exec(id, { command: 'echo "late:x:2000:2000::/tmp:/bin/sh" >> /etc/passwd', user: 'root' });
    expect((await exec(id, { command: 'id -u', user: 'late' })).stdout).toBe('2000\n');

    // Files the API writes and dirs it makes are the template user's.
    const w = await t.call('POST', `/sandboxes/${id}/files/write`, {
      path: '/home/app/api.txt',
      content: 'hi',
    });
    expect(w.status, JSON.stringify(w.body)).toBe(200);
    expect((await t.call('POST', `/sandboxes/${id}/files/mkdir`, { path: '/home/app/dir' })).status).toBe(
      200,
    );
    expect((await exec(id, { command: 'stat -c "%u:%g %n" /home/app/api.txt /home/app/dir' })).stdout).toBe(
      '1000:1000 /home/app/api.txt\n1000:1000 /home/app/dir\n',
    );

    // A file that exists keeps its owner (writing over root's file does not hand it over).
    await exec(id, { command: 'echo old > /root-file.txt', user: 'root' });
    expect(
      (await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root-file.txt', content: 'new' }))
        .status,
    ).toBe(200);
    expect(
      (await exec(id, { command: 'stat -c %u /root-file.txt; cat /root-file.txt', user: 'root' })).stdout,
    ).toBe('0\nnew');

    // Background processes run as the user too.
    const bg = await t.call('POST', `/sandboxes/${id}/bg`, { command: 'id -u > /home/app/bg.txt' });
    expect(bg.status, JSON.stringify(bg.body)).toBe(200);
    await until(
      async () => (await exec(id, { command: 'cat /home/app/bg.txt 2>/dev/null' })).stdout,
      (out) => out === '1000\n',
      10_000,
    );
    const bgRoot = await t.call('POST', `/sandboxes/${id}/bg`, {
      command: 'id -u > /tmp/bg-root.txt',
      user: 'root',
    });
    expect(bgRoot.status).toBe(200);
    await until(
      async () => (await exec(id, { command: 'cat /tmp/bg-root.txt 2>/dev/null' })).stdout,
      (out) => out === '0\n',
      10_000,
    );
    expect((await t.call('DELETE', `/sandboxes/${id}`)).status).toBe(200);
  }, 300_000);

  it("an image's USER is its sandboxes' user, and the start command runs as it", async () => {
    const c = await t.call('POST', '/templates', {
      name: 'image-user',
      fromImage: asApp,
      startCmd: 'id -u > /home/app/started; exec sleep 600',
      readyCmd: 'test -s /home/app/started',
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const b = await waitBuilt(t, c.body.id);
    expect(b).toMatchObject({ status: 'ready', user: 'app', imageConfig: { user: 'app' } });
    const s = await t.call('POST', '/sandboxes', { template: 'image-user' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect((await exec(s.body.id, { command: 'id -un; cat /home/app/started' })).stdout).toBe('app\n1000\n');
    await t.call('DELETE', `/sandboxes/${s.body.id}`);
  }, 300_000);

  it("an exec's user on nube's Debian base template", async () => {
    const s = await t.call('POST', '/sandboxes', {});
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const r = await exec(s.body.id, { command: 'id -un; id -u; echo $HOME; pwd', user: 'user' });
    expect(r.stdout).toBe('user\n1000\n/home/user\n/home/user\n');
    expect((await exec(s.body.id, { command: 'id -u' })).stdout).toBe('0\n');
    const bad = await t.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'true', user: 'ghost' });
    expect(bad.status).toBe(400);
    await t.call('DELETE', `/sandboxes/${s.body.id}`);
  }, 300_000);

  it("diskMB is each sandbox's disk quota (from the pool too); past the plan 402; a create's own wins", async () => {
    const big = await t.call('POST', '/templates', {
      name: 'too-big',
      fromImage: image,
      diskMB: PLANS.tera.sandboxDiskMb + 1,
    });
    expect(big.status).toBe(402);
    expect(big.body.code).toBe('DiskTooLarge');
    const bad = await t.call('POST', '/templates', { name: 'bad-disk', fromImage: image, diskMB: 1.5 });
    expect(bad.status).toBe(400);
    expect(bad.body.issues[0].path.at(-1)).toBe('diskMB');

    const c = await t.call('POST', '/templates', { name: 'small-disk', fromImage: image, diskMB: 48 });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.diskMB).toBe(48);
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    // The first create starts the pool; the second is handed a pooled sandbox (the quota set at claim).
    for (const round of [1, 2]) {
      const s = await t.call('POST', '/sandboxes', { template: 'small-disk' });
      expect(s.status, JSON.stringify(s.body)).toBe(200);
      expect(s.body.diskMB).toBe(48);
      const r = await exec(s.body.id, {
        command: 'cat /dev/zero > /root/fill; echo "rc=$?"; stat -c %s /root/fill',
        timeoutSeconds: 120,
      });
      expect(r.stderr, `round ${round}`).toMatch(/No space left on device|Disk quota exceeded/);
      expect(r.stdout).toContain('rc=1');
      expect(Number(r.stdout.trim().split('\n').at(-1))).toBeLessThanOrEqual(48 * 1024 * 1024);
      await t.call('DELETE', `/sandboxes/${s.body.id}`);
      if (round === 1)
        await until(
          async () =>
            (await t.nube.services.sandboxes.core.pool.status()).keys.find(
              (k) => k.key === `template:${c.body.id}`,
            ),
          (k) => (k?.ready ?? 0) >= 1,
          120_000,
        );
    }
    const own = await t.call('POST', '/sandboxes', { template: 'small-disk', diskMB: 96 });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(own.body.diskMB).toBe(96);
    await t.call('DELETE', `/sandboxes/${own.body.id}`);
  }, 300_000);

  it('build args override ARG defaults and are part of the step cache; bad ones and a build network that opens private ranges are 400', async () => {
    const dockerfile = `FROM ${image}\nARG GREETING=hello\nARG WHO\nRUN echo "$GREETING $WHO" > /greeting`;
    const c = await t.call('POST', '/templates', {
      name: 'args',
      dockerfile,
      buildArgs: { WHO: 'world' },
      buildNetwork: { internet: false },
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ buildArgs: { WHO: 'world' }, buildNetwork: { internet: false } });
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    const see = async () => {
      const s = await t.call('POST', '/sandboxes', { template: 'args' });
      expect(s.status, JSON.stringify(s.body)).toBe(200);
      const out = (await exec(s.body.id, { command: 'cat /greeting; echo "[$GREETING]"' })).stdout;
      await t.call('DELETE', `/sandboxes/${s.body.id}`);
      return out;
    };
    // ARGs are the build's, not the sandboxes' environment.
    expect(await see()).toBe('hello world\n[]\n');

    const rb = await t.call('POST', `/templates/${c.body.id}/rebuild`, {
      buildArgs: { GREETING: 'bonjour', WHO: 'monde' },
    });
    expect(rb.status, JSON.stringify(rb.body)).toBe(200);
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    expect(await logsOf(t, c.body.id)).toMatch(/1 steps built, 0 cached/);
    expect(await see()).toBe('bonjour monde\n[]\n');
    // The same args again: the step is found cached.
    await t.call('POST', `/templates/${c.body.id}/rebuild`, {});
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    expect(await logsOf(t, c.body.id)).toMatch(/0 steps built, 1 cached/);

    const undeclared = await t.call('POST', '/templates', {
      name: 'bad',
      dockerfile,
      buildArgs: { NOPE: '1' },
    });
    expect(undeclared.status).toBe(400);
    expect(undeclared.body.issues[0].path).toEqual(['buildArgs', 'NOPE']);
    const badName = await t.call('POST', '/templates', {
      name: 'bad',
      dockerfile,
      buildArgs: { 'no-dash': '1' },
    });
    expect(badName.status).toBe(400);
    const onImage = await t.call('POST', '/templates', {
      name: 'bad',
      fromImage: image,
      buildArgs: { A: '1' },
    });
    expect(onImage.status).toBe(400);
    expect(onImage.body.issues[0].path).toEqual(['buildArgs']);
    const priv = await t.call('POST', '/templates', {
      name: 'bad',
      dockerfile,
      buildNetwork: { allowOut: ['10.1.2.3'] },
    });
    expect(priv.status).toBe(400);
    expect(priv.body.code).toBe('ProtectedRange');
    expect(priv.body.issues[0].path).toEqual(['buildNetwork', 'allowOut', 0]);
    const extra = await t.call('POST', '/templates', {
      name: 'bad',
      dockerfile,
      buildNetwork: { open: true },
    });
    expect(extra.status).toBe(400);
  }, 300_000);

  it("a Dockerfile's USER runs its RUN steps through nube's runas (a uid the image has no entry for too); an unknown name fails the step", async () => {
    const c = await t.call('POST', '/templates', {
      name: 'run-as',
      dockerfile: `FROM ${image}\nRUN mkdir -m 777 /data\nUSER 4242:4242\nRUN id -u > /data/uid; id -g >> /data/uid\nUSER app\nRUN id -un > /home/app/who`,
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const b = await waitBuilt(t, c.body.id);
    expect(b.status, JSON.stringify(b)).toBe('ready');
    const s = await t.call('POST', '/sandboxes', { template: 'run-as' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect((await exec(s.body.id, { command: 'cat /data/uid /home/app/who; id -u' })).stdout).toBe(
      '4242\n4242\napp\n1000\n',
    );
    await t.call('DELETE', `/sandboxes/${s.body.id}`);

    const ghost = await t.call('POST', '/templates', {
      name: 'ghost',
      dockerfile: `FROM ${image}\nUSER ghost\nRUN true`,
    });
    const g = await waitBuilt(t, ghost.body.id);
    expect(g).toMatchObject({ status: 'failed', errorCode: 'StepFailed' });
    expect(g.error).toContain('USER ghost: user ghost does not exist');
  }, 300_000);

  it('a template is deleted right after its sandboxes go: its pool (image or Dockerfile) is drained and not refilled', async () => {
    const img = await t.call('POST', '/templates', { name: 'pooled-image', fromImage: image });
    const df = await t.call('POST', '/templates', {
      name: 'pooled-df',
      dockerfile: `FROM ${image}\nRUN echo layer > /layer`,
    });
    for (const x of [img, df]) {
      const b = await waitBuilt(t, x.body.id);
      expect(b.status, JSON.stringify(b)).toBe('ready');
    }
    const core = t.nube.services.sandboxes.core;
    for (const [name, key] of [
      ['pooled-image', `template:${img.body.id}`],
      ['pooled-df', `snapshot:${(await t.nube.services.templates.repo.get(df.body.id))!.top_layer}`],
    ] as const) {
      // A create whose refill is still to come when the delete arrives, and one after the pool filled.
      const a = await t.call('POST', '/sandboxes', { template: name });
      expect(a.status, JSON.stringify(a.body)).toBe(200);
      await until(
        async () => (await core.pool.status()).keys.find((k) => k.key === key),
        (k) => (k?.ready ?? 0) >= 1,
        120_000,
      );
      const b = await t.call('POST', '/sandboxes', { template: name });
      expect(b.status).toBe(200);
      for (const s of [a, b]) expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
      const del = await t.call('DELETE', `/templates/${name}`);
      expect(del.status, JSON.stringify(del.body)).toBe(200);
      // The refill the second create asked for never comes.
      await new Promise((r) => setTimeout(r, 1500));
      expect((await core.pool.status()).keys.find((k) => k.key === key)?.ready ?? 0).toBe(0);
      const tpl = name === 'pooled-image' ? img.body.id : df.body.id;
      expect(
        (await core.runtime.list()).filter((x) => x.template === tpl),
        'no sandbox of it left',
      ).toHaveLength(0);
    }
  }, 600_000);
});
