// One sandbox through the API end to end: create, exec, run-code, files, bg, patch, bootstrap,
// suspend/resume, fork, snapshot, derived templates, run-cell, runtime, logs, delete.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newRow } from '../../src/areas/sandboxes/rows.js';
import { bgBody, deleteBody, execBody, filesBody, patchBody, suspendResumeBody } from './lifecycle-bodies.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube } from './helpers.js';

let t: SandboxNube;
let id: string;
const sx = (path: string) => `/sandboxes/${id}${path}`;

describe.each(DRIVERS)('%s: sandboxes API lifecycle', (driver) => {
  beforeAll(async () => {
    // A sandbox suspended with its memory gives it back after 3 s here (60 minutes by default).
    t = await startSandboxNube('lifecycle', { NUBE_SANDBOX_DRIVER: driver, NUBE_SANDBOX_MEMORY_HOLD_MINUTES: '0.05' });
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

  it('execs with env, cwd and per-call env, dedicated route and action alike', () => execBody(t, id));

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

  it('files: write, read (utf8 and base64), list, mkdir, move, delete, GET forms', () => filesBody(t, id));

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

  it('bg: start, list, logs from offsets, kill with grace', () => bgBody(t, id), 180_000);

  it('apply-patch applies a good diff and changes nothing on a bad one', () => patchBody(t, id));

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

  it('bootstrap runs at wake; suspend pauses the TTL; resume rewrites env', () => suspendResumeBody(t, id));

  it('suspend with keepMemory keeps running processes (no bootstrap on the thaw) until the hold time', async () => {
    const bg = await t.call('POST', sx('/bg'), { command: 'exec sleep 600' });
    expect(bg.status).toBe(200);
    await t.call('POST', sx('/bootstrap'), { script: 'echo woke >> /root/thaw.log', mode: 'blocking' });
    const s = await t.call('POST', sx('/suspend'), { keepMemory: true });
    expect(s.body.sandbox).toMatchObject({ status: 'suspended', memoryKept: true });
    expect((await t.call('POST', sx('/suspend'), { keepMemory: 'yes' })).status).toBe(400);
    const r = await t.call('POST', sx('/resume'));
    expect(r.body).toMatchObject({ sandbox: { status: 'running', memoryKept: false }, bootstrap: null });
    const alive = await t.call('GET', sx(`/bg/${bg.body.execId}`));
    expect(alive.body.state).toBe('running');
    expect((await t.call('POST', sx('/exec'), { command: 'cat /root/thaw.log 2>/dev/null || echo none' })).body.stdout).toBe('none\n');
    // Past the hold time the memory goes back and the processes with it; the files stay.
    await t.call('POST', sx('/suspend'), { keepMemory: true });
    let g = await t.call('GET', sx(''));
    for (let i = 0; i < 150 && g.body.memoryKept; i++) {
      await new Promise((res) => setTimeout(res, 100));
      g = await t.call('GET', sx(''));
    }
    expect(g.body).toMatchObject({ status: 'suspended', memoryKept: false });
    const events = (await t.call('POST', sx('/logs'))).body.events.map((e: { event: string }) => e.event);
    expect(events).toContain('memory-released');
    const woke = await t.call('POST', sx('/resume'));
    expect(woke.body.bootstrap).toMatchObject({ mode: 'blocking' });
    expect((await t.call('GET', sx(`/bg/${bg.body.execId}`))).body.state).not.toBe('running');
    expect((await t.call('POST', sx('/exec'), { command: 'cat /root/thaw.log' })).body.stdout).toBe('woke\n');
    await t.call('POST', sx('/bootstrap'), { script: '' });
  }, 120_000);

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

  it('network-policy validates and applies; the networking actions answer', async () => {
    const n = await t.call('POST', sx('/network-policy'), { internet: false, allowOut: ['1.1.1.1'] });
    expect(n.status, JSON.stringify(n.body)).toBe(200);
    expect(n.body).toMatchObject({ internet: false, allowOut: ['1.1.1.1'] });
    expect((await t.call('POST', sx('/network-policy'), { denyOut: ['10.0.0.0/99'] })).status).toBe(400);
    // (test/sandboxes/raw-ports, ssh and domains test them end to end)
    const raw = await t.call('POST', sx('/expose-raw'), { port: 22 });
    expect(raw.status, JSON.stringify(raw.body)).toBe(200);
    expect(raw.body).toMatchObject({ port: 22, protocol: 'tcp' });
    const ssh = await t.call('POST', sx('/ssh-enable'));
    expect(ssh.status, JSON.stringify(ssh.body)).toBe(200);
    expect(ssh.body.enabled).toBe(true);
    expect((await t.call('POST', sx('/domain-list'))).body).toEqual({ domains: [] });
    expect((await t.call('POST', sx('/no-such-action'))).status).toBe(400);
    expect((await t.call('POST', sx('/idle'), { suspendOnIdle: true })).status).toBe(400);
    expect((await t.call('POST', sx('/idle'), { suspendOnIdle: true, idleTtlSeconds: 59 })).status).toBe(400);
  });

  it('delete destroys; afterwards every route is 404', () => deleteBody(t, id));
});
