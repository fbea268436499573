// Test bodies of one sandbox's life through the API, run by test/sandboxes/lifecycle.test.ts on one
// nube in process and by test/nodes/processes.test.ts through a client that spreads each request over
// three nube processes. They use nothing but HTTP calls; each body is the `it` of the same name there.
// The order matters as in that file: a sandbox created with env GREETING=hola; patchBody before
// suspendResumeBody (which lists /root/p), deleteBody last.
import { expect } from 'vitest';
import type { JsonCaller } from '../helpers/server.js';

export async function execBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  const e = await t.call('POST', sx('/exec'), {
    command: 'echo "$GREETING $X"; pwd; hostname',
    cwd: '/tmp',
    env: { X: 'mundo' },
  });
  expect(e.status).toBe(200);
  expect(e.body).toMatchObject({ exitCode: 0, timedOut: false, truncated: false, stderr: '' });
  expect(e.body.stdout).toBe(`hola mundo\n/tmp\n${id.replace('_', '-')}\n`);
  expect(Number.isInteger(e.body.durationMs)).toBe(true);
  const a = await t.call('POST', sx('/exec'), { command: 'exit 7' });
  expect(a.body.exitCode).toBe(7);
  // The same body through the action route's loose union.
  const viaAction = await t.call('POST', sx('/exec'), { command: 'echo via' });
  expect(viaAction.body.stdout).toBe('via\n');
}

export async function filesBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  const w = await t.call('POST', sx('/files/write'), { path: '/root/dir/a.txt', content: 'héllo\n' });
  expect(w.status, JSON.stringify(w.body)).toBe(200);
  const bin = Buffer.from([0, 255, 1, 254]).toString('base64');
  expect(
    (await t.call('POST', sx('/files/write'), { path: 'dir/b.bin', content: bin, encoding: 'base64' }))
      .status,
  ).toBe(200);
  const r = await t.call('POST', sx('/files/read'), { path: '/root/dir/a.txt' });
  expect(r.body).toMatchObject({ content: 'héllo\n', encoding: 'utf8', size: 7 });
  const rb = await t.call('GET', sx('/files/read?path=/root/dir/b.bin'));
  expect(rb.body).toMatchObject({ content: bin, encoding: 'base64', size: 4 });
  expect((await t.call('POST', sx('/files/mkdir'), { path: '/root/dir/sub' })).status).toBe(200);
  expect(
    (await t.call('POST', sx('/files/move'), { from: '/root/dir/a.txt', to: '/root/dir/sub/c.txt' }))
      .status,
  ).toBe(200);
  const ls = await t.call('GET', sx('/files/list?path=/root/dir'));
  expect(ls.body.entries.map((e: { name: string }) => e.name).sort()).toEqual(['b.bin', 'sub']);
  expect((await t.call('POST', sx('/files/read'), { path: '/root/dir/a.txt' })).status).toBe(404);
  expect((await t.call('POST', sx('/files/delete'), { path: '/root/dir' })).status).toBe(400);
  expect((await t.call('POST', sx('/files/delete'), { path: '/root/dir', recursive: true })).status).toBe(
    200,
  );
  expect((await t.call('GET', sx('/files/list?path=/root/dir'))).status).toBe(404);
  expect((await t.call('GET', sx('/files/write?path=/root/x'))).status).toBe(400);
  expect((await t.call('POST', sx('/files/write'), { path: '/root/x' })).status).toBe(400);
  expect(
    (await t.call('POST', sx('/files/write'), { path: '/root/x', content: '%%%', encoding: 'base64' }))
      .status,
  ).toBe(400);
}

export async function bgBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  // The process writes "two" only when told to (a file appears), so what is read does not depend on
  // how fast this machine is.
  const s = await t.call('POST', sx('/bg'), {
    command: "exec sh -c 'echo one; while [ ! -e /tmp/bg-go ]; do sleep 0.05; done; echo two; exec sleep 60'",
  });
  expect(s.status).toBe(200);
  const execId = s.body.execId;
  const logs = async (query = '') => {
    for (let i = 0; i < 600; i++) {
      const r = await t.call('GET', sx(`/bg/${execId}${query}`));
      if (r.body.logs.stdout !== '') return r;
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error('no output from the background process');
  };
  const first = await logs();
  expect(first.body).toMatchObject({ execId, state: 'running', exitCode: null });
  expect(first.body.logs.stdout).toBe('one\n');
  await t.call('POST', sx('/exec'), { command: 'touch /tmp/bg-go' });
  const next = await logs(`?stdoutOffset=${first.body.logs.stdoutNextOffset}`);
  expect(next.body.logs.stdout).toBe('two\n');
  const l = await t.call('GET', sx('/bg'));
  expect(l.body.count).toBeGreaterThanOrEqual(1);
  expect(l.body.processes.map((p: { execId: string }) => p.execId)).toContain(execId);
  expect((await t.call('DELETE', sx(`/bg/${execId}?graceSeconds=0`))).body).toEqual({ ok: true });
  const done = await t.call('GET', sx(`/bg/${execId}`));
  expect(done.body.state).toBe('exited');
  expect((await t.call('DELETE', sx(`/bg/${execId}?graceSeconds=31`))).status).toBe(400);
  expect((await t.call('GET', sx('/bg/bg_0000'))).status).toBe(404);
}

export async function patchBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  await t.call('POST', sx('/files/write'), { path: '/root/p/a.txt', content: 'hello\nworld\n' });
  const good = '--- a/p/a.txt\n+++ b/p/a.txt\n@@ -1,2 +1,2 @@\n-hello\n+bonjour\n world\n';
  const g = await t.call('POST', sx('/apply-patch'), { patch: good });
  expect(g.status, JSON.stringify(g.body)).toBe(200);
  expect((await t.call('POST', sx('/files/read'), { path: '/root/p/a.txt' })).body.content).toBe(
    'bonjour\nworld\n',
  );
  const bad = '--- a/p/a.txt\n+++ b/p/a.txt\n@@ -1,2 +1,2 @@\n-nothing\n+x\n world\n';
  const b = await t.call('POST', sx('/apply-patch'), { patch: bad });
  expect(b.status).toBe(400);
  expect(b.body.code).toBe('PatchFailed');
  expect((await t.call('POST', sx('/files/read'), { path: '/root/p/a.txt' })).body.content).toBe(
    'bonjour\nworld\n',
  );
}

export async function suspendResumeBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  const b = await t.call('POST', sx('/bootstrap'), {
    script: 'echo "woke $GREETING" >> /root/boot.log',
    mode: 'blocking',
  });
  expect(b.status).toBe(200);
  const s = await t.call('POST', sx('/suspend'));
  expect(s.body.sandbox).toMatchObject({ status: 'suspended', expiresAt: null });
  expect((await t.call('GET', sx(''))).body.status).toBe('suspended');
  const r = await t.call('POST', sx('/resume'), { env: { GREETING: 'salut' } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body.sandbox.status).toBe('running');
  expect(r.body.bootstrap.mode).toBe('blocking');
  expect(Date.parse(r.body.sandbox.expiresAt)).toBeGreaterThan(Date.now() + 400_000);
  const e = await t.call('POST', sx('/exec'), {
    command: 'echo $GREETING; cat /root/boot.log; ls /root/p',
  });
  expect(e.body.stdout).toBe('salut\nwoke salut\na.txt\n');
  expect((await t.call('POST', sx('/resume'))).status).toBe(409);
  expect((await t.call('POST', sx('/bootstrap'), { script: '' })).body.bootstrap).toBeNull();
}

export async function deleteBody(t: JsonCaller, id: string): Promise<void> {
  const sx = (path: string) => `/sandboxes/${id}${path}`;
  expect((await t.call('DELETE', sx(''))).body).toEqual({ ok: true });
  expect((await t.call('GET', sx(''))).status).toBe(404);
  expect((await t.call('POST', sx('/exec'), { command: 'true' })).status).toBe(404);
}
