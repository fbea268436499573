// E2B's template SDK against nube, unchanged: `Template.build(t, {alias})` from an image in a real
// registry on loopback (docker-registry; busybox as its shell and tools) with runCmd, copy of local
// files, setEnvs, setWorkdir, setUser and a start command with its ready command; `Sandbox.create(alias)`
// then starts it. Also fromTemplate, a rebuild with nothing changed (every step cached), a failing
// runCmd and bad input as the SDK's own errors.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BuildError, Sandbox, Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, stopSandboxNube } from '../sandboxes/helpers.js';
import { busyboxLayer, dropTemplates, pushImage, type RunningRegistry, startRegistry, tarOf } from '../templates/registry.js';
import { startE2bNube } from './e2b-helpers.js';

let reg: RunningRegistry;
let t: SandboxNube;
let image: string;
let ctx: string;

const logsOf = async (id: string) => (await (await fetch(`${t.baseUrl}/api/v2/templates/${id}/build-logs`, { headers: t.auth })).text());

describe('e2b SDK: template builds', () => {
  beforeAll(async () => {
    reg = await startRegistry();
    // E2B's commands run `/bin/bash -l -c`: E2B's provisioning installs bash, nube's does not, so the
    // image has one (busybox's sh behind the name).
    const bash = await tarOf([{ name: 'bin/bash', content: '#!/bin/sh\nexec /bin/sh "$@"\n', mode: 0o755 }]);
    pushImage(reg.host, 'test/e2b-bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }, { tar: bash, compression: 'gzip' }], {
      Env: ['PATH=/bin'],
    });
    image = `${reg.host}/test/e2b-bb:v1`;
    t = await startE2bNube('e2b-templates', [], { NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin });
    ctx = mkdtempSync(join(tmpdir(), 'nube-e2b-ctx-'));
    writeFileSync(join(ctx, 'hello.txt'), 'hello from a local file\n');
    mkdirSync(join(ctx, 'site'));
    writeFileSync(join(ctx, 'site', 'index.html'), '<h1>served by the start command</h1>\n');
  }, 300_000);

  afterAll(async () => {
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
    if (ctx) rmSync(ctx, { recursive: true, force: true });
  }, 120_000);

  const web = () =>
    Template({ fileContextPath: ctx })
      .fromImage(image)
      .runCmd('id -un > /home/user/built-by')
      .setEnvs({ GREETING: 'hello e2b', SECOND: 'two words' })
      .setWorkdir('/srv/www')
      .copy('site/', '/srv/www/')
      .copy('hello.txt', 'hello.txt')
      .runCmd('echo "$GREETING from $(pwd)" > note.txt')
      .setUser('app')
      .setStartCmd('httpd -f -p 8080 -h /srv/www', 'wget -q -O /dev/null http://127.0.0.1:8080/index.html');

  it('builds from an image with runCmd, copy, setEnvs, setWorkdir, setUser and a start command; Sandbox.create(alias) starts it', async () => {
    const logs: string[] = [];
    const built = await Template.build(web(), { alias: 'e2b-web', onBuildLogs: (l) => logs.push(l.message) });
    expect(built).toMatchObject({ alias: 'e2b-web', templateId: 'e2b-web' });
    expect(logs.join('\n')).toContain("Uploaded 'site/'");
    expect(logs.join('\n')).toMatch(/steps built, 0 cached/);
    expect(await Template.exists('e2b-web')).toBe(true);
    expect(await Template.exists('e2b-none')).toBe(false);
    // It is one of the owner's templates in nube's own API too, built from a Dockerfile.
    const own = await t.call('GET', '/templates/e2b-web');
    expect(own.body).toMatchObject({ name: 'e2b-web', status: 'ready', user: 'app', workdir: null, startCmd: 'httpd -f -p 8080 -h /srv/www' });
    expect(own.body.imageConfig).toMatchObject({ workdir: '/srv/www', user: 'app' });

    const sbx = await Sandbox.create('e2b-web', { timeoutMs: 120_000 });
    try {
      const r = await sbx.commands.run(
        'pwd; id -un; echo "$GREETING/$SECOND"; cat hello.txt note.txt /home/user/built-by; stat -c "%U %a" hello.txt index.html; wget -q -O - http://127.0.0.1:8080/index.html',
      );
      expect(r.stdout).toBe(
        '/srv/www\napp\nhello e2b/two words\nhello from a local file\nhello e2b from /srv/www\nuser\nuser 644\nuser 644\n<h1>served by the start command</h1>\n',
      );
      // A user named by the call still wins, and files land where the SDK says.
      expect((await sbx.commands.run('id -un', { user: 'root' })).stdout).toBe('root\n');
      expect(await sbx.files.read('/srv/www/hello.txt')).toBe('hello from a local file\n');
    } finally {
      await sbx.kill();
    }
  });

  it('a build with nothing changed uploads nothing and finds every step cached', async () => {
    const logs: string[] = [];
    const started = Date.now();
    await Template.build(web(), { alias: 'e2b-web', onBuildLogs: (l) => logs.push(l.message) });
    const took = Date.now() - started;
    const text = logs.join('\n');
    expect(text).toContain("Skipping upload of 'site/', already cached");
    expect(text).toContain("Skipping upload of 'hello.txt', already cached");
    expect(text).toMatch(/0 steps built, \d+ cached/);
    expect(took).toBeLessThan(20_000);
  });

  it('fromTemplate builds on the alias; its sandboxes keep the parent\'s files and working dir', async () => {
    const child = Template().fromTemplate('e2b-web').runCmd('echo child of $(id -un) > child.txt');
    await Template.build(child, 'e2b-child');
    const sbx = await Sandbox.create('e2b-child');
    try {
      const r = await sbx.commands.run('pwd; cat child.txt hello.txt; id -un');
      expect(r.stdout).toBe('/srv/www\nchild of user\nhello from a local file\nuser\n');
    } finally {
      await sbx.kill();
    }
  });

  it('fromDockerfile builds the Dockerfile\'s steps; skipCache reruns its steps; DELETE removes the template', async () => {
    const df = Template({ fileContextPath: ctx }).fromDockerfile(
      [`FROM ${image}`, 'ENV MODE=docker', 'WORKDIR /app', 'COPY hello.txt ./', 'RUN echo $MODE > mode.txt', 'RUN id -un >> mode.txt'].join('\n'),
    );
    await Template.build(df, 'e2b-df');
    const sbx = await Sandbox.create('e2b-df');
    try {
      // No USER in the Dockerfile: the SDK makes `user` the default, as E2B does.
      expect((await sbx.commands.run('pwd; cat mode.txt hello.txt; id -un')).stdout).toBe('/app\ndocker\nroot\nhello from a local file\nuser\n');
    } finally {
      await sbx.kill();
    }
    const stamped = () => Template().fromTemplate('e2b-df').skipCache().runCmd('cat /proc/sys/kernel/random/uuid > /home/user/stamp');
    const logs: string[] = [];
    await Template.build(stamped(), { alias: 'e2b-stamp', onBuildLogs: (l) => logs.push(l.message) });
    await Template.build(stamped(), { alias: 'e2b-stamp', onBuildLogs: (l) => logs.push(l.message) });
    expect(logs.filter((l) => /^1 steps built, 1 cached/.test(l))).toHaveLength(1);
    expect(logs.filter((l) => /^2 steps built, 0 cached/.test(l))).toHaveLength(1);

    const del = await fetch(`${t.baseUrl}/e2b/templates/e2b-stamp`, { method: 'DELETE', headers: { 'X-API-KEY': t.ownerKey } });
    expect(del.status).toBe(204);
    expect(await Template.exists('e2b-stamp')).toBe(false);
  });

  it('a failing runCmd is a BuildError with the step and its output', async () => {
    const bad = Template().fromImage(image).setEnvs({ X: '1' }).runCmd('echo boom-line; exit 3');
    const err = await Template.build(bad, 'e2b-fails').then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BuildError);
    expect((err as Error).message).toMatch(/^step 2 \(RUN echo boom-line; exit 3\) exited 3; its last lines:\nboom-line/);
    const own = await t.call('GET', '/templates/e2b-fails');
    expect(own.body).toMatchObject({ status: 'failed', errorCode: 'StepFailed' });
    expect(await logsOf(own.body.id)).toContain('boom-line');
  });

  it('bad input: an unknown base image and a bad name are the SDK\'s errors', async () => {
    const missing = await Template.build(Template().fromImage(`${reg.host}/test/nope:v1`).runCmd('true'), 'e2b-missing').then(
      () => null,
      (e: unknown) => e,
    );
    expect(missing).toBeInstanceOf(BuildError);
    expect((missing as Error).message).toMatch(/not found/i);
    const named = await Template.build(Template().fromImage(image), 'Bad Name').then(
      () => null,
      (e: unknown) => e,
    );
    expect(named).toBeInstanceOf(BuildError);
    expect((named as Error).message).toMatch(/^400: Bad Name is not a template name/);
    const unknownFrom = await Template.build(Template().fromTemplate('e2b-none').runCmd('true'), 'e2b-orphan').then(
      () => null,
      (e: unknown) => e,
    );
    expect(unknownFrom).toBeInstanceOf(BuildError);
  });
});
