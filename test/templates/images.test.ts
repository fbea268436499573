// Templates from OCI images, end to end through the API: a real registry on loopback (docker-registry)
// holding images the test makes (glibc with usr-merged links and two layers, gzip then zstd, with a
// whiteout, an opaque dir, a hard link and a file of uid 1000; musl with busybox; a distroless one
// with no shell, behind a multi-platform index), each started as a sandbox that runs a command.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DRIVERS,
  type SandboxNube,
  startSandboxNube,
  stopSandboxNube,
  TEST_ROOT,
} from '../sandboxes/helpers.js';
import {
  dropTemplates,
  hostFile,
  pushImage,
  type RunningRegistry,
  startRegistry,
  tarOf,
  type TarEntry,
  waitBuilt,
} from './registry.js';

/** The shared libraries a host program loads (ldd), as entries under /usr/lib (usr-merged). */
function libsOf(programs: string[]): TarEntry[] {
  const seen = new Map<string, TarEntry>();
  for (const p of programs) {
    for (const m of execFileSync('ldd', [p], { encoding: 'utf8' }).matchAll(/(\/\S+\.so[.\d]*)/g)) {
      const path = m[1]!;
      const into = path.includes('ld-linux')
        ? `usr/lib64/${basename(path)}`
        : `usr/lib/x86_64-linux-gnu/${basename(path)}`;
      if (!seen.has(into)) seen.set(into, hostFile(realpathSync(path), into));
    }
  }
  return [...seen.values()];
}

describe.each(DRIVERS)('%s: templates from OCI images', (driver) => {
  let reg: RunningRegistry;
  let t: SandboxNube;
  const work = mkdtempSync(join(tmpdir(), 'nube-images-'));

  beforeAll(async () => {
    reg = await startRegistry();
    const usrMerged: TarEntry[] = [
      { name: 'usr/', type: 'directory' },
      { name: 'usr/bin/', type: 'directory' },
      { name: 'usr/lib/', type: 'directory' },
      { name: 'usr/lib/x86_64-linux-gnu/', type: 'directory' },
      { name: 'usr/lib64/', type: 'directory' },
      { name: 'bin', type: 'symlink', linkname: 'usr/bin' },
      { name: 'lib', type: 'symlink', linkname: 'usr/lib' },
      { name: 'lib64', type: 'symlink', linkname: 'usr/lib64' },
    ];
    const progs = ['/usr/bin/dash', '/usr/bin/cat', '/usr/bin/ls'];
    const lower = await tarOf([
      ...usrMerged,
      ...progs.map((p) => hostFile(p, `usr/bin/${basename(p)}`)),
      { name: 'usr/bin/sh', type: 'symlink', linkname: 'dash' },
      ...libsOf(progs),
      { name: 'etc/', type: 'directory' },
      { name: 'etc/removed', content: 'gone soon\n' },
      { name: 'opt/data/old', content: 'old\n' },
    ]);
    const upper = await tarOf([
      { name: 'etc/greeting', content: 'hello from layer 2\n' },
      { name: 'etc/.wh.removed' },
      { name: 'opt/data/.wh..wh..opq' },
      { name: 'opt/data/new', content: 'new\n' },
      { name: 'usr/bin/cat2', type: 'link', linkname: 'usr/bin/cat' },
      { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000 },
      { name: 'home/app/file', content: 'mine\n', uid: 1000, gid: 1000 },
    ]);
    pushImage(
      reg.host,
      'test/glibc',
      'v1',
      [
        { tar: lower, compression: 'gzip' },
        { tar: upper, compression: 'zstd' },
      ],
      { Env: ['PATH=/usr/bin:/bin', 'GREETING=from-image'] },
    );

    // musl: busybox (static) as the shell, and a program linked against musl's loader.
    writeC(`${work}/hello.c`, 'hello from musl');
    execFileSync('musl-gcc', ['-o', `${work}/hello-musl`, `${work}/hello.c`]);
    pushImage(reg.host, 'test/musl', 'v1', [
      {
        tar: await tarOf([
          { name: 'bin/', type: 'directory' },
          hostFile('/bin/busybox', 'bin/busybox'),
          { name: 'bin/sh', type: 'symlink', linkname: 'busybox' },
          { name: 'bin/cat', type: 'symlink', linkname: 'busybox' },
          hostFile(realpathSync('/lib/ld-musl-x86_64.so.1'), 'lib/ld-musl-x86_64.so.1'),
          hostFile(`${work}/hello-musl`, 'usr/bin/hello-musl'),
        ]),
        compression: 'gzip',
      },
    ]);

    // distroless: one static program, no shell at all; behind an index with an arm64 image first.
    writeC(`${work}/static.c`, 'hello from a static program');
    execFileSync('gcc', ['-static', '-O2', '-o', `${work}/hello-static`, `${work}/static.c`]);
    pushImage(
      reg.host,
      'test/distroless',
      'v1',
      [
        {
          tar: await tarOf([
            { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/sbin/nologin\n' },
            hostFile(`${work}/hello-static`, 'hello'),
          ]),
          compression: 'gzip',
        },
      ],
      {},
      { otherArch: true },
    );

    t = await startSandboxNube(
      'images',
      { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin },
      undefined,
      { templates: [] },
    );
  }, 300_000);

  afterAll(async () => {
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
    rmSync(work, { recursive: true, force: true });
  }, 120_000);

  it('a glibc image of two layers (gzip, zstd): whiteouts, opaque dir, hard link, owners, its Env; in use it cannot be deleted', async () => {
    const c = await t.call('POST', '/templates', {
      name: 'glibc',
      fromImage: `${reg.host}/test/glibc:v1`,
      env: { EXTRA: 'yes' },
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({
      name: 'glibc',
      status: 'building',
      fromImage: `${reg.host}/test/glibc:v1`,
    });
    const built = await waitBuilt(t, c.body.id);
    expect(built, JSON.stringify(built)).toMatchObject({ status: 'ready', phase: 'done', errorCode: null });
    expect(built.layers).toHaveLength(2);
    expect(built.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(built.progress).toMatchObject({ percent: 100, layersDone: 2, layersTotal: 2 });
    expect(built.sizeBytes).toBeGreaterThan(100_000);

    // By name, like a built-in template.
    const s = await t.call('POST', '/sandboxes', { template: 'glibc', env: { MINE: '1' } });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const sid = s.body.id;
    const r = await t.call('POST', `/sandboxes/${sid}/exec`, {
      command:
        'cat /etc/greeting; ls /opt/data; test -e /etc/removed || echo removed-is-gone; set -- $(ls -ln /home/app/file); echo $3; cat2 /etc/greeting; echo "$GREETING $EXTRA $MINE"',
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.stdout).toBe(
      'hello from layer 2\nnew\nremoved-is-gone\n1000\nhello from layer 2\nfrom-image yes 1\n',
    );
    expect(r.body.exitCode).toBe(0);

    const del = await t.call('DELETE', `/templates/${c.body.id}`);
    expect(del.status).toBe(409);
    expect(del.body.code).toBe('TemplateInUse');
    expect((await t.call('DELETE', `/sandboxes/${sid}`)).status).toBe(200);
    expect((await t.call('DELETE', '/templates/glibc')).status).toBe(200);
    expect((await t.call('GET', `/templates/${c.body.id}`)).status).toBe(404);
    expect(existsSync(`${TEST_ROOT}/templates/${c.body.id}`)).toBe(false);
  }, 300_000);

  it('a second template of the same image fetches no layer; the build log streams as SSE', async () => {
    const a = await t.call('POST', '/templates', { name: 'glibc-a', fromImage: `${reg.host}/test/glibc:v1` });
    expect((await waitBuilt(t, a.body.id)).status).toBe('ready');
    const b = await t.call('POST', '/templates', { name: 'glibc-b', fromImage: `${reg.host}/test/glibc:v1` });
    expect((await waitBuilt(t, b.body.id)).status).toBe('ready');
    const res = await fetch(`${t.baseUrl}/api/v2/templates/${b.body.id}/build-logs`, { headers: t.auth });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const text = await res.text();
    expect(text).toContain('event: log');
    expect(text).toMatch(/layer 1\/2 sha256:[0-9a-f]+ cached/);
    expect(text).toMatch(/layer 2\/2 sha256:[0-9a-f]+ cached/);
    expect(text).toMatch(/event: done\ndata: \{"status":"ready"/);
    // Resumed after a line: only the later ones.
    const later = await fetch(`${t.baseUrl}/api/v2/templates/${b.body.id}/build-logs`, {
      headers: { ...t.auth, 'last-event-id': '2' },
    });
    expect(await later.text()).not.toContain('id: 2\n');
    for (const x of [a, b]) expect((await t.call('DELETE', `/templates/${x.body.id}`)).status).toBe(200);
  }, 300_000);

  it('a musl image (busybox) and a distroless one without a shell, picked from a multi-platform index, run commands', async () => {
    const musl = await t.call('POST', '/templates', { name: 'musl', fromImage: `${reg.host}/test/musl:v1` });
    const dl = await t.call('POST', '/templates', {
      name: 'distroless',
      fromImage: `${reg.host}/test/distroless:v1`,
    });
    expect((await waitBuilt(t, musl.body.id)).status).toBe('ready');
    const d = await waitBuilt(t, dl.body.id);
    expect(d, JSON.stringify(d)).toMatchObject({ status: 'ready' });
    const logs = await (
      await fetch(`${t.baseUrl}/api/v2/templates/${dl.body.id}/build-logs`, { headers: t.auth })
    ).text();
    expect(logs).toContain("nube's static shell is /bin/sh");

    const m = await t.call('POST', '/sandboxes', { template: 'musl' });
    expect(m.status, JSON.stringify(m.body)).toBe(200);
    const mr = await t.call('POST', `/sandboxes/${m.body.id}/exec`, {
      command: 'hello-musl; readlink /bin/sh',
    });
    expect(mr.body).toMatchObject({ stdout: 'hello from musl\nbusybox\n', exitCode: 0 });

    const s = await t.call('POST', '/sandboxes', { template: dl.body.id });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const sr = await t.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'echo "shell ok"; /hello' });
    expect(sr.body).toMatchObject({ stdout: 'shell ok\nhello from a static program\n', exitCode: 0 });
    for (const id of [m.body.id, s.body.id]) await t.call('DELETE', `/sandboxes/${id}`);
  }, 300_000);

  it("another owner's template id is not a template name; a template still building is refused in words", async () => {
    const fake = await t.call('POST', '/sandboxes', { template: 'tmpl_000000000abcdefabcdef' });
    expect(fake.status).toBe(400);
    const c = await t.call('POST', '/templates', { name: 'slow', fromImage: `${reg.host}/test/glibc:v1` });
    const s = await t.call('POST', '/sandboxes', { template: 'slow' });
    if (s.status !== 200) {
      expect(s.status).toBe(409);
      expect(s.body.code).toBe('TemplateNotReady');
    } else await t.call('DELETE', `/sandboxes/${s.body.id}`);
    await waitBuilt(t, c.body.id);
    expect((await t.call('DELETE', `/templates/${c.body.id}`)).status).toBe(200);
  }, 120_000);
});

function writeC(path: string, text: string): void {
  execFileSync('sh', ['-c', `cat > '${path}'`], {
    input: `#include <stdio.h>\nint main(void){puts("${text}");return 0;}\n`,
  });
}
