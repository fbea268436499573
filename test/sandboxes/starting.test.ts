// A sandbox waiting for its template says what it waits for (phase, progress), and one whose start
// fails stays visible as `failed` with the reason until it is deleted or its timeout passes. The
// server gets an empty templates dir of its own: a build "in another process" is played by holding
// the build's lock here; a build that really fails is mmdebstrap against a mirror that refuses.
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readTemplate } from '../../src/areas/sandboxes/runtime/namespaces/templates.js';
import { buildInProgress } from '../../src/areas/sandboxes/runtime/namespaces/test-env.js';
import { DRIVERS, type SandboxNube, TEST_ROOT, startSandboxNube, stopSandboxNube, until } from './helpers.js';

describe.each(DRIVERS)('%s: starting and failed sandboxes', (driver) => {
  const root = `${TEST_ROOT}/starting-${driver}-${process.pid}`;
  const templates = `${root}/templates`;
  let t: SandboxNube;

  beforeAll(async () => {
    mkdirSync(templates, { recursive: true });
    t = await startSandboxNube(
      'starting',
      // Nothing listens on port 1: a build gets as far as apt-get update and fails.
      { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATES_DIR: templates, NUBE_SANDBOX_MIRROR: 'http://127.0.0.1:1/debian' },
      undefined,
      { templates: [] },
    );
  }, 120_000);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it('while its template builds elsewhere, a sandbox shows the phase and progress; then it runs', async () => {
    // Another process is building `base` (the lock and its progress file, as a builder writes them).
    const other = await buildInProgress(templates, 'base', 'I: installing remaining packages inside the chroot...');

    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 300 });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ status: 'starting', phase: 'building template base', error: null });
    expect(c.body.progress).toMatchObject({ step: 'downloading and installing packages' });
    expect(c.body.progress.percent).toBeGreaterThanOrEqual(17);
    expect(c.body.progress.percent).toBeLessThan(100);
    const id = c.body.id;
    const listed = (await t.call('GET', '/sandboxes')).body.sandboxes.find((s: { id: string }) => s.id === id);
    expect(listed).toMatchObject({ status: 'starting', phase: 'building template base' });
    // Nothing runs yet: every call that needs the sandbox says so (409), none says 404.
    for (const [m, path, body] of [
      ['POST', '/exec', { command: 'true' }],
      ['GET', '/bg', undefined],
      ['POST', '/snapshot', {}],
      ['POST', '/runtime', undefined],
      ['POST', '/network-policy', { internet: false }],
    ] as const) {
      const r = await t.call(m, `/sandboxes/${id}${path}`, body);
      expect(r, path).toMatchObject({ status: 409, body: { code: 'SandboxStarting' } });
    }

    // The build finishes: its tree appears (the shared test build's rootfs) and the lock goes.
    const shared = await readTemplate(`${TEST_ROOT}/templates`, 'base', other.build);
    expect(shared).not.toBeNull();
    await other.finish(shared!);
    const g = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status !== 'starting', 60_000);
    expect(g.body).toMatchObject({ status: 'running', phase: null, progress: null, error: null });
    expect((await t.call('POST', `/sandboxes/${id}/exec`, { command: 'echo up' })).body.stdout).toBe('up\n');
    expect((await t.call('DELETE', `/sandboxes/${id}`)).body).toEqual({ ok: true });
  }, 120_000);

  it('a sandbox whose template cannot be built is failed with the reason, answers 409 until deleted', async () => {
    const c = await t.call('POST', '/sandboxes', { template: 'code-interpreter', timeoutSeconds: 600 });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.status).toBe('starting');
    expect(c.body.phase).toMatch(/template code-interpreter$/);
    const id = c.body.id;
    const g = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status !== 'starting', 300_000);
    expect(g.status).toBe(200);
    expect(g.body).toMatchObject({ status: 'failed', phase: null, progress: null });
    expect(g.body.error).toContain('template code-interpreter could not be built');
    expect(g.body.error).toContain('127.0.0.1:1');
    expect(Date.parse(g.body.expiresAt)).toBeGreaterThan(Date.now());
    const listed = (await t.call('GET', '/sandboxes')).body.sandboxes.find((s: { id: string }) => s.id === id);
    expect(listed).toMatchObject({ status: 'failed', error: g.body.error });
    for (const [m, path, body] of [
      ['POST', '/exec', { command: 'true' }],
      ['POST', '/files/read', { path: '/etc/hostname' }],
      ['GET', '/bg', undefined],
      ['POST', '/suspend', undefined],
      ['POST', '/resume', undefined],
      ['POST', '/snapshot', {}],
      ['POST', '/fork', {}],
      ['POST', '/extend', {}],
    ] as const) {
      const r = await t.call(m, `/sandboxes/${id}${path}`, body);
      expect(r.status, path).toBe(409);
      expect(r.body, path).toMatchObject({ code: 'SandboxFailed', reason: g.body.error });
      expect(r.body.error, path).toContain('sandbox failed to start');
    }
    const logs = await t.call('POST', `/sandboxes/${id}/logs`);
    expect(logs.body.events.map((e: { event: string }) => e.event)).toEqual(['created', 'failed']);
    expect((await t.call('DELETE', `/sandboxes/${id}`)).body).toEqual({ ok: true });
    expect((await t.call('GET', `/sandboxes/${id}`)).status).toBe(404);
  }, 360_000);

  it('a start cut by nube stopping is not kept as failed: it stays starting and runs again', async () => {
    const jobs = t.nube.deps.jobs;
    await jobs.stop();
    let id = '';
    try {
      const c = await t.call('POST', '/sandboxes', { template: 'code-interpreter', timeoutSeconds: 600 });
      id = c.body.id;
      // The start fails (its template cannot be built) while nube is stopping: that is nube's stop.
      const cut = { signal: new AbortController().signal, stopping: AbortSignal.abort(new Error('job queue stopping')) };
      await expect(t.nube.services.sandboxes.core.provision(id, cut)).rejects.toThrow();
      const g = await t.call('GET', `/sandboxes/${id}`);
      expect(g.body).toMatchObject({ status: 'starting', error: null });
    } finally {
      jobs.start();
    }
    // Run again by its job, the start fails for its own reason and is kept as failed.
    const g = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status !== 'starting', 300_000);
    expect(g.body.status).toBe('failed');
    expect((await t.call('DELETE', `/sandboxes/${id}`)).body).toEqual({ ok: true });
  }, 360_000);

  it('a failed sandbox goes when its timeout passes', async () => {
    const c = await t.call('POST', '/sandboxes', { template: 'code-interpreter', timeoutSeconds: 20 });
    const id = c.body.id;
    const g = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.status === 404, 300_000);
    expect(g.status).toBe(404);
  }, 360_000);
});
