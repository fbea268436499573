// Templates from a Dockerfile, end to end through the API: FROM an image in a real registry on
// loopback (docker-registry; busybox as its shell and tools), a context of the test's own uploaded
// as a file, every supported instruction, the step cache (an edit to the last line rebuilds only it),
// failures in words, and a start command the create waits for.
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube } from '../sandboxes/helpers.js';
import {
  busyboxLayer,
  dropTemplates,
  pushImage,
  type RunningRegistry,
  startRegistry,
  tarOf,
  waitBuilt,
} from './registry.js';

async function upload(t: SandboxNube, name: string, data: Buffer): Promise<string> {
  const c = await t.call('POST', '/files', { fileName: name, contentType: 'application/gzip', size: data.length });
  expect(c.status, JSON.stringify(c.body)).toBe(201);
  const put = await fetch(c.body.putUrl, { method: 'PUT', body: data, headers: { 'content-type': 'application/gzip' } });
  expect(put.status).toBe(200);
  return c.body.file.id;
}

const logsOf = async (t: SandboxNube, id: string) =>
  (await (await fetch(`${t.baseUrl}/api/v2/templates/${id}/build-logs`, { headers: t.auth })).text());

describe.each(DRIVERS)('%s: templates from a Dockerfile', (driver) => {
  let reg: RunningRegistry;
  let t: SandboxNube;
  let image: string;
  let contextId: string;

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(reg.host, 'test/bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }], {
      Env: ['PATH=/bin', 'FROM_IMAGE=yes'],
    });
    image = `${reg.host}/test/bb:v1`;
    t = await startSandboxNube(
      'dockerfile',
      { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin },
      undefined,
      { templates: [] },
    );
    const bundle = gzipSync(await tarOf([{ name: 'inner/readme', content: 'from the bundle\n' }]));
    const context = gzipSync(
      await tarOf([
        { name: 'app/', type: 'directory' },
        { name: 'app/index.html', content: '<h1>served</h1>\n' },
        { name: 'app/run.sh', content: '#!/bin/sh\necho running\n', mode: 0o755 },
        { name: 'data.txt', content: 'owned by app\n' },
        { name: 'bundle.tar.gz', content: bundle },
      ]),
    );
    contextId = await upload(t, 'context.tar.gz', context);
  }, 300_000);

  afterAll(async () => {
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
  }, 120_000);

  const dockerfile = (last: string) =>
    [
      '# a comment',
      `FROM ${image}`,
      'ARG GREETING=hello',
      'ENV APP_HOME=/srv/app \\',
      '    MSG="${GREETING} world"',
      'WORKDIR $APP_HOME',
      'COPY app/ ./',
      'COPY --chown=app:app data.txt /home/app/data.txt',
      'ADD bundle.tar.gz /opt/bundle/',
      'RUN echo "$MSG from $(pwd) $FROM_IMAGE" > built.txt',
      'USER app',
      'RUN id -u > /home/app/uid',
      'EXPOSE 8080',
      'CMD ["httpd", "-f", "-p", "8080", "-h", "/srv/app"]',
      last,
    ].join('\n');

  it('builds every instruction from a context; sandboxes get its env and WORKDIR and start its CMD; an edit to the last line rebuilds only it', async () => {
    const c = await t.call('POST', '/templates', {
      name: 'web',
      dockerfile: dockerfile('RUN echo one > /home/app/last.txt'),
      context: contextId,
      readyCmd: 'wget -q -O /dev/null http://127.0.0.1:8080/index.html',
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ status: 'building', fromImage: null });
    const built = await waitBuilt(t, c.body.id);
    expect(built, JSON.stringify(built)).toMatchObject({ status: 'ready', phase: 'done' });
    expect(built.progress).toMatchObject({ percent: 100, stepsDone: 12, stepsTotal: 12 });
    expect(built.imageConfig).toMatchObject({ workdir: '/srv/app', user: 'app', exposedPorts: ['8080/tcp'] });
    const logs = await logsOf(t, c.body.id);
    expect(logs).toContain('step 1/12: ARG GREETING=hello');
    expect(logs).toContain('step 12/12: RUN echo one > /home/app/last.txt');
    expect(logs).toMatch(/6 steps built, 0 cached/);

    const s = await t.call('POST', '/sandboxes', { template: 'web' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const r = await t.call('POST', `/sandboxes/${s.body.id}/exec`, {
      command:
        'pwd; cat built.txt /home/app/last.txt; ./run.sh; cat /opt/bundle/inner/readme; stat -c "%u %g" /home/app/data.txt; cat /home/app/uid; echo "$MSG"; wget -q -O - http://127.0.0.1:8080/index.html',
    });
    expect(r.body.stdout).toBe(
      '/srv/app\nhello world from /srv/app yes\none\nrunning\nfrom the bundle\n1000 1000\n1000\nhello world\n<h1>served</h1>\n',
    );
    expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);

    // The last line edited: the 11 steps before are found cached, only it runs.
    const started = Date.now();
    const rb = await t.call('POST', `/templates/${c.body.id}/rebuild`, {
      dockerfile: dockerfile('RUN echo two > /home/app/last.txt'),
    });
    expect(rb.status, JSON.stringify(rb.body)).toBe(200);
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    const took = Date.now() - started;
    const again = await logsOf(t, c.body.id);
    expect(again.replace(/data: /g, ""), again).toMatch(/1 steps built, 5 cached/);
    expect(again).toContain('step 9/12: RUN id -u > /home/app/uid (cached)');
    console.log(`[${driver}] rebuild with the last step changed: ${took} ms`);
    const s2 = await t.call('POST', '/sandboxes', { template: 'web' });
    const r2 = await t.call('POST', `/sandboxes/${s2.body.id}/exec`, { command: 'cat /home/app/last.txt built.txt' });
    expect(r2.body.stdout).toBe('two\nhello world from /srv/app yes\n');
    await t.call('DELETE', `/sandboxes/${s2.body.id}`);

    // FROM one of your own templates: its layers, its settings.
    const child = await t.call('POST', '/templates', { name: 'child', dockerfile: 'FROM web\nRUN echo child > /home/app/child.txt' });
    expect(child.status, JSON.stringify(child.body)).toBe(200);
    expect((await waitBuilt(t, child.body.id)).status).toBe('ready');
    const s3 = await t.call('POST', '/sandboxes', { template: 'child' });
    expect(s3.status, JSON.stringify(s3.body)).toBe(200);
    const r3 = await t.call('POST', `/sandboxes/${s3.body.id}/exec`, { command: 'cat /home/app/child.txt /home/app/last.txt' });
    expect(r3.body.stdout).toBe('child\ntwo\n');
    // In use (a sandbox of its child stands on its layers): not deleted.
    const del = await t.call('DELETE', '/templates/web');
    expect(del.status).toBe(409);
    expect(del.body.code).toBe('TemplateInUse');
    await t.call('DELETE', `/sandboxes/${s3.body.id}`);
    expect((await t.call('DELETE', '/templates/child')).status).toBe(200);
    expect((await t.call('DELETE', '/templates/web')).status).toBe(200);
  }, 600_000);

  it('a RUN that fails says which step, its exit code and its last lines; bad Dockerfiles answer 400 naming the line', async () => {
    const c = await t.call('POST', '/templates', {
      name: 'fails',
      dockerfile: `FROM ${image}\nENV X=1\nRUN echo first line; echo second line >&2; exit 2`,
    });
    expect(c.status).toBe(200);
    const b = await waitBuilt(t, c.body.id);
    expect(b).toMatchObject({ status: 'failed', errorCode: 'StepFailed' });
    expect(b.error).toContain('RUN step 2/2 (line 3) exited 2');
    expect(b.error).toContain('second line');
    await t.call('DELETE', `/templates/${c.body.id}`);

    for (const [text, words] of [
      [`FROM ${image}\nRUN true\nHEALTHCHECK CMD true`, 'line 3: HEALTHCHECK is not supported'],
      [`FROM ${image}\nFROBNICATE x`, 'line 2: unknown instruction FROBNICATE'],
      [`FROM ${image} AS a\nFROM a`, 'line 2: multi-stage'],
      [`RUN true`, 'line 1: a Dockerfile starts with FROM'],
      [`FROM ${image}\nCOPY --from=a /x /y`, 'line 2: COPY --from'],
      [`FROM ${image}\nENV "unterminated`, 'line 2: unterminated'],
    ] as const) {
      const r = await t.call('POST', '/templates', { name: 'bad', dockerfile: text });
      expect(r.status, text).toBe(400);
      expect(r.body.error).toContain(words);
      expect(r.body.issues[0].path).toEqual(['dockerfile']);
    }
    const both = await t.call('POST', '/templates', { name: 'bad', dockerfile: `FROM ${image}`, fromImage: image });
    expect(both.status).toBe(400);
    const notTar = await t.call('POST', '/templates', {
      name: 'bad',
      dockerfile: `FROM ${image}\nCOPY a /a`,
      context: await upload(t, 'x.tar.gz', Buffer.from('not an archive at all, no')),
    });
    expect(notTar.status).toBe(400);
    expect(notTar.body.issues[0].path).toEqual(['context']);
  }, 300_000);

  it('startCmd and readyCmd on an image template: the create answers once the server answers; workdir applies to commands', async () => {
    const c = await t.call('POST', '/templates', {
      name: 'svc',
      fromImage: image,
      startCmd: 'echo up > ok && exec httpd -f -p 9000 -h /home/app',
      readyCmd: 'wget -q -O /dev/null http://127.0.0.1:9000/ok',
      workdir: '/home/app',
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect((await waitBuilt(t, c.body.id)).status).toBe('ready');
    const s = await t.call('POST', '/sandboxes', { template: 'svc' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const r = await t.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'pwd; cat ok' });
    expect(r.body.stdout).toBe('/home/app\nup\n');
    await t.call('DELETE', `/sandboxes/${s.body.id}`);

    // A start command that dies: the create fails in words and leaves no sandbox.
    const bad = await t.call('POST', '/templates', {
      name: 'svc-bad',
      fromImage: image,
      startCmd: 'echo cannot start >&2; exit 3',
      readyCmd: 'false',
    });
    expect((await waitBuilt(t, bad.body.id)).status).toBe('ready');
    const f = await t.call('POST', '/sandboxes', { template: 'svc-bad' });
    expect(f.status).toBe(502);
    expect(f.body.code).toBe('TemplateStartFailed');
    expect(f.body.error).toContain('exited 3');
    expect(f.body.error).toContain('cannot start');
    expect((await t.call('GET', '/sandboxes')).body.sandboxes).toHaveLength(0);
    for (const n of ['svc', 'svc-bad']) expect((await t.call('DELETE', `/templates/${n}`)).status).toBe(200);
  }, 300_000);
});
