// A data directory under a directory only root can enter (a clone in /root, or `mkdir -m 700`): the
// sandbox's user namespace (uid 100000 outside) cannot walk that path, so everything it reaches by
// path lives in the run dir instead. Templates sit under the private directory too (a bind mount of
// the shared test templates), as they do under a real private data dir.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import {
  DRIVERS,
  type SandboxNube,
  TEMPLATE_WAIT_MS,
  TEST_ROOT,
  createRunning,
  startSandboxNube,
  stopSandboxNube,
} from './helpers.js';

describe.each(DRIVERS)('%s: sandboxes with the data directory under a 0700 directory', (driver) => {
  const priv = `${TEST_ROOT}/private-${driver}-${process.pid}`;
  const templates = `${priv}/templates`;
  let t: SandboxNube;
  let id: string;
  const sx = (path: string) => `/sandboxes/${id}${path}`;

  beforeAll(async () => {
    mkdirSync(templates, { recursive: true, mode: 0o700 });
    execFileSync('chmod', ['700', priv]);
    execFileSync('mount', ['--bind', `${TEST_ROOT}/templates`, templates]);
    t = await startSandboxNube('private', { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATES_DIR: templates }, `${priv}/data`);
    id = (await createRunning(t, { timeoutSeconds: 600 })).id;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    try {
      if (t) await stopSandboxNube(t);
    } finally {
      execFileSync('umount', [templates]);
      rmSync(priv, { recursive: true, force: true });
    }
  }, 120_000);

  it('the private directory stays private; the mount point is entered by the sandbox uid only', async () => {
    expect(statSync(priv).mode & 0o777).toBe(0o700);
    const run = `${(t.nube.services.sandboxes.core.runtime as NamespacesRuntime).runDir}/${id.replace('_', '-')}`;
    const st = statSync(run);
    expect(st.mode & 0o777).toBe(0o700);
    expect(st.uid).toBe(100_000);
  });

  it('exec, files, background processes', async () => {
    const e = await t.call('POST', sx('/exec'), { command: 'id -u; hostname' });
    expect(e.status, JSON.stringify(e.body)).toBe(200);
    expect(e.body.stdout).toBe(`0\n${id.replace('_', '-')}\n`);
    expect((await t.call('POST', sx('/files/write'), { path: '/root/a.txt', content: 'private' })).status).toBe(200);
    expect((await t.call('POST', sx('/files/read'), { path: '/root/a.txt' })).body.content).toBe('private');
    const bg = await t.call('POST', sx('/bg'), { command: 'echo up; exec sleep 60' });
    expect(bg.status, JSON.stringify(bg.body)).toBe(200);
    for (let i = 0; i < 100 && (await t.call('GET', sx(`/bg/${bg.body.execId}`))).body.logs.stdout !== 'up\n'; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await t.call('DELETE', sx(`/bg/${bg.body.execId}?graceSeconds=0`))).status).toBe(200);
    expect((await t.call('GET', sx(`/bg/${bg.body.execId}`))).body.state).toBe('exited');
  });

  it('snapshot and fork', async () => {
    expect((await t.call('POST', sx('/snapshot'))).body.snapshotId).toMatch(/^snap_/);
    const f = await t.call('POST', sx('/fork'), { count: 1 });
    expect(f.status, JSON.stringify(f.body)).toBe(200);
    const child = f.body.sandboxes[0].id;
    expect((await t.call('POST', `/sandboxes/${child}/exec`, { command: 'cat /root/a.txt' })).body.stdout).toBe('private');
    expect((await t.call('DELETE', `/sandboxes/${child}`)).status).toBe(200);
  });

  it('suspend and resume keep the files', async () => {
    expect((await t.call('POST', sx('/suspend'))).body.sandbox.status).toBe('suspended');
    const r = await t.call('POST', sx('/resume'));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((await t.call('POST', sx('/exec'), { command: 'cat /root/a.txt' })).body.stdout).toBe('private');
    expect((await t.call('DELETE', sx(''))).body).toEqual({ ok: true });
  });
});
