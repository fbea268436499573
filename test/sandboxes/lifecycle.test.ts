// One sandbox through the API end to end: create, exec, run-code, files, bg, patch, bootstrap,
// suspend/resume, fork, snapshot, derived templates, run-cell, runtime, logs, delete.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newRow } from '../../src/areas/sandboxes/rows.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube } from './helpers.js';

let t: SandboxNube;
let id: string;
const sx = (path: string) => `/sandboxes/${id}${path}`;

describe.each(DRIVERS)('%s: sandboxes API lifecycle', (driver) => {
  beforeAll(async () => {
    t = await startSandboxNube('lifecycle', { NUBE_SANDBOX_DRIVER: driver });
    const c = await t.call('POST', '/sandboxes', {
      timeoutSeconds: 600,
      env: { GREETING: 'hola' },
      metadata: { team: 'a' },
    });
    expect(c.status).toBe(200);
    // The template is built (startSandboxNube waited for it): the sandbox starts in the request.
    expect(c.body).toMatchObject({ status: 'running', phase: null, progress: null, error: null });
    id = c.body.id;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('creates a running sandbox that get and list show', async () => {
    expect(id).toMatch(/^sbx_[0-9a-z]+$/);
    const g = await t.call('GET', sx(''));
    expect(g.body).toMatchObject({
      id,
      status: 'running',
      template: 'base',
      metadata: { team: 'a' },
      timeoutSeconds: 600,
    });
    expect(Date.parse(g.body.expiresAt)).toBeGreaterThan(Date.now() + 500_000);
    const l = await t.call('GET', '/sandboxes');
    expect(l.body.sandboxes.map((s: { id: string }) => s.id)).toContain(id);
  });

  it('execs with env, cwd and per-call env, dedicated route and action alike', async () => {
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
  });

  it('exec deadline kills the process group and says timedOut', async () => {
    const t0 = Date.now();
    const e = await t.call('POST', sx('/exec'), {
      command: 'sleep 301 & sleep 302; echo never',
      timeoutSeconds: 1,
    });
    expect(e.status).toBe(200);
    expect(e.body.timedOut).toBe(true);
    expect(e.body.exitCode).toBeNull();
    expect(e.body.stdout).toBe('');
    // Killed at the 1 s deadline, not after the sleeps' 300 s; the bound is generous for a busy machine.
    expect(Date.now() - t0).toBeLessThan(120_000);
    const ps = await t.call('POST', sx('/exec'), { command: "pgrep -f 'sleep 30[12]' || echo none" });
    expect(ps.body.stdout).toBe('none\n');
  }, 300_000);

  it('rejects bad exec bodies with 400', async () => {
    expect((await t.call('POST', sx('/exec'), { command: '' })).status).toBe(400);
    expect((await t.call('POST', sx('/exec'), { command: 'true', timeoutSeconds: 601 })).status).toBe(400);
    expect((await t.call('POST', sx('/run-code'), { code: 'x', lang: 'ruby' })).status).toBe(400);
  });

  it('run-code runs python, node and bash (route and action)', async () => {
    const py = await t.call('POST', sx('/run-code'), {
      code: 'import sys\nprint(sum(range(10)), sys.argv[0].startswith("/tmp/"))',
      lang: 'python',
    });
    expect(py.body).toMatchObject({ exitCode: 0, stdout: '45 True\n' });
    const js = await t.call('POST', sx('/run-code'), {
      code: 'console.log([1,2,3].map(x => x * 2).join(","))',
      lang: 'node',
    });
    expect(js.body.stdout).toBe('2,4,6\n');
    const sh = await t.call('POST', sx('/run-code'), { code: 'echo "$((6*7))"; exit 3', lang: 'bash' });
    expect(sh.body).toMatchObject({ stdout: '42\n', exitCode: 3 });
    const left = await t.call('POST', sx('/exec'), { command: 'ls /tmp | grep -c nube-run || true' });
    expect(left.body.stdout).toBe('0\n');
  });

  it('files: write, read (utf8 and base64), list, mkdir, move, delete, GET forms', async () => {
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
  });

  it('file contents and code keep any text, NUL included (they never reach the metadata store); a NUL path or command is a 400', async () => {
    const w = await t.call('POST', sx('/files/write'), { path: '/root/nul.txt', content: 'a\u0000b\n' });
    expect(w.status, JSON.stringify(w.body)).toBe(200);
    expect(w.body.size).toBe(4);
    const r = await t.call('POST', sx('/files/read'), { path: '/root/nul.txt' });
    expect(r.body).toMatchObject({ content: 'a\u0000b\n', encoding: 'utf8', size: 4 });
    const od = await t.call('POST', sx('/exec'), { command: 'od -An -c /root/nul.txt | tr -s " "' });
    expect(od.body.stdout).toBe(' a \\0 b \\n\n');
    // The code reaches the interpreter's file as sent: the script dumps itself, NUL and all, and stops
    // before bash reads the line holding the NUL.
    const sh = await t.call('POST', sx('/run-code'), { code: 'od -An -c "$0" | tr -d " \\n"; exit\n#\u0000', lang: 'bash' });
    expect(sh.status, JSON.stringify(sh.body)).toBe(200);
    expect(sh.body.stdout).toContain('#\\0');
    // A path or a command line cannot hold NUL (C strings end there): 400 naming the field.
    const p = await t.call('POST', sx('/files/write'), { path: '/root/a\u0000b', content: 'x' });
    expect(p.status).toBe(400);
    expect(p.body.issues[0].path).toEqual(['body', 'path']);
    const c = await t.call('POST', sx('/exec'), { command: 'echo a\u0000b' });
    expect(c.status).toBe(400);
    expect(c.body.issues[0].path).toEqual(['body', 'command']);
  });

  it('bg: start, list, logs from offsets, kill with grace', async () => {
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
  }, 180_000);

  it('apply-patch applies a good diff and changes nothing on a bad one', async () => {
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
  });

  it('run-cell on base (no Jupyter) is a 400 naming the code-interpreter template', async () => {
    const r = await t.call('POST', sx('/run-cell'), { code: '1' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.code).toBe('KernelUnavailable');
    expect(r.body.error).toContain('code-interpreter');
    expect((await t.call('POST', sx('/exec'), { command: 'echo still' })).body.stdout).toBe('still\n');
  });

  it('runtime and logs describe the sandbox', async () => {
    const r = await t.call('POST', sx('/runtime'));
    expect(r.body).toMatchObject({ id, status: 'running', template: 'base', driver });
    expect(r.body.address).toMatch(/^10\.78\./);
    expect(r.body.limits.memoryMB).toBeGreaterThan(0);
    const l = await t.call('POST', sx('/logs'));
    expect(l.body.events[0].event).toBe('created');
  });

  it('bootstrap runs at wake; suspend pauses the TTL; resume rewrites env', async () => {
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
  });

  it('fork: the child sees the parent files; the parent keeps running', async () => {
    await t.call('POST', sx('/files/write'), { path: '/root/parent.txt', content: 'from parent' });
    const f = await t.call('POST', sx('/fork'), { count: 2, metadata: { role: 'child' } });
    expect(f.status, JSON.stringify(f.body)).toBe(200);
    expect(f.body.sandboxes).toHaveLength(2);
    const child = f.body.sandboxes[0];
    expect(child).toMatchObject({ status: 'running', parentId: id, metadata: { role: 'child' } });
    const c = await t.call('POST', `/sandboxes/${child.id}/exec`, {
      command: 'cat /root/parent.txt; echo " $GREETING"; echo x > /root/child.txt',
    });
    expect(c.body.stdout).toBe('from parent salut\n');
    const p = await t.call('POST', sx('/exec'), {
      command: 'test -e /root/child.txt && echo leaked || echo separate',
    });
    expect(p.body.stdout).toBe('separate\n');
    for (const s of f.body.sandboxes)
      expect((await t.call('DELETE', `/sandboxes/${s.id}`)).body).toEqual({ ok: true });
    expect((await t.call('POST', sx('/fork'), { count: 11 })).status).toBe(400);
  });

  it('snapshot, template-snapshot (idempotent), create from templateKey/hash, in-use delete', async () => {
    const snap = await t.call('POST', sx('/snapshot'), { name: 'before' });
    expect(snap.body.snapshotId).toMatch(/^snap_/);
    const key = { key: 'py-deps', hash: 'v1.0' };
    const d1 = await t.call('POST', sx('/template-snapshot'), key);
    expect(d1.status, JSON.stringify(d1.body)).toBe(200);
    expect(d1.body).toMatchObject({ ...key, stale: false, baseTemplate: 'base', liveChildren: 0 });
    const d2 = await t.call('POST', sx('/template-snapshot'), key);
    expect(d2.body.id).toBe(d1.body.id);
    expect((await t.call('GET', '/template-snapshots?key=py-deps&hash=v1.0')).body.id).toBe(d1.body.id);
    expect((await t.call('GET', `/template-snapshots/${d1.body.id}`)).body.key).toBe('py-deps');
    expect((await t.call('GET', '/template-snapshots')).body.items).toHaveLength(1);
    const missing = await t.call('GET', '/template-snapshots?key=py-deps&hash=v2');
    expect(missing).toMatchObject({ status: 404, body: { code: 'DerivedTemplateNotProvisioned' } });
    const none = await t.call('POST', '/sandboxes', { templateKey: 'py-deps', templateHash: 'v2' });
    expect(none).toMatchObject({ status: 404, body: { code: 'DerivedTemplateNotProvisioned' } });
    expect((await t.call('POST', sx('/template-snapshot'), { key: '-bad', hash: 'x' })).status).toBe(400);

    const c = await t.call('POST', '/sandboxes', {
      templateKey: 'py-deps',
      templateHash: 'v1.0',
      timeoutSeconds: 120,
    });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ status: 'running', templateKey: 'py-deps', templateHash: 'v1.0' });
    const e = await t.call('POST', `/sandboxes/${c.body.id}/exec`, { command: 'cat /root/parent.txt' });
    expect(e.body.stdout).toBe('from parent');
    const del = await t.call('DELETE', `/template-snapshots/${d1.body.id}`);
    expect(del).toMatchObject({ status: 409, body: { code: 'DerivedTemplateInUse', children: [c.body.id] } });
    await t.call('DELETE', `/sandboxes/${c.body.id}`);
    expect((await t.call('DELETE', `/template-snapshots/${d1.body.id}`)).body).toEqual({ ok: true });
    expect((await t.call('GET', `/template-snapshots/${d1.body.id}`)).status).toBe(404);
  });

  it('a derived template taken on an older base build is stale: 409 DerivedTemplateStale', async () => {
    const d = await t.call('POST', sx('/template-snapshot'), { key: 'stale', hash: 'h' });
    expect(d.body.stale).toBe(false);
    // As if `base` had been rebuilt since: the record names another build time.
    await t.nube.services.sandboxes.core.repo.db
      .updateTable('sandbox_templates')
      .set({ base_built_at: '2000-01-01T00:00:00.000Z' })
      .where('id', '=', d.body.id)
      .execute();
    expect((await t.call('GET', `/template-snapshots/${d.body.id}`)).body.stale).toBe(true);
    const again = await t.call('POST', sx('/template-snapshot'), { key: 'stale', hash: 'h' });
    expect(again).toMatchObject({ status: 409, body: { code: 'DerivedTemplateStale' } });
    expect((await t.call('DELETE', `/template-snapshots/${d.body.id}`)).body).toEqual({ ok: true });
  });

  it('a sandbox whose template is still building answers starting; the provisioning job starts it', async () => {
    const core = t.nube.services.sandboxes.core;
    const principal = {
      scheme: 'owner' as const,
      ownerId: (await core.repo.get(id))!.owner_id,
      plan: 'tera' as const,
    };
    // The record a create writes before its job runs (the template build is what the job waits for).
    const row = newRow((e) => core.seal(e), principal, {
      template: 'base',
      timeoutSeconds: 60,
      suspendOnIdle: false,
      env: { A: '1' },
    });
    await core.repo.insert(row);
    expect((await t.call('GET', `/sandboxes/${row.id}`)).body.status).toBe('starting');
    const busy = await t.call('POST', `/sandboxes/${row.id}/exec`, { command: 'true' });
    expect(busy).toMatchObject({ status: 409, body: { code: 'SandboxStarting' } });
    await core.provision(row.id);
    expect((await t.call('GET', `/sandboxes/${row.id}`)).body.status).toBe('running');
    expect((await t.call('POST', `/sandboxes/${row.id}/exec`, { command: 'echo $A' })).body.stdout).toBe(
      '1\n',
    );
    await t.call('DELETE', `/sandboxes/${row.id}`);
  });

  it('network-policy validates and applies; unported actions answer 501', async () => {
    const n = await t.call('POST', sx('/network-policy'), { internet: false, allowOut: ['1.1.1.1'] });
    expect(n.status, JSON.stringify(n.body)).toBe(200);
    expect(n.body).toMatchObject({ internet: false, allowOut: ['1.1.1.1'] });
    expect((await t.call('POST', sx('/network-policy'), { denyOut: ['10.0.0.0/99'] })).status).toBe(400);
    for (const a of ['expose-raw', 'ssh-enable', 'domain-list']) {
      const r = await t.call('POST', sx(`/${a}`), a === 'expose-raw' ? { port: 22 } : undefined);
      expect(r.status).toBe(501);
      expect(r.body.code).toBe('NotImplemented');
    }
    expect((await t.call('POST', sx('/no-such-action'))).status).toBe(400);
    expect((await t.call('POST', sx('/idle'), { suspendOnIdle: true })).status).toBe(400);
    expect((await t.call('POST', sx('/idle'), { suspendOnIdle: true, idleTtlSeconds: 59 })).status).toBe(400);
  });

  it('delete destroys; afterwards every route is 404', async () => {
    expect((await t.call('DELETE', sx(''))).body).toEqual({ ok: true });
    expect((await t.call('GET', sx(''))).status).toBe(404);
    expect((await t.call('POST', sx('/exec'), { command: 'true' })).status).toBe(404);
  });
});
