// Issue 33, the rest of item 1 and the pool: a pooled sandbox takes volume mounts at its claim (a pool
// hit, the mounts bound into the running sandbox: nosuid, nodev, read-only when asked, back after a
// suspend); machines and agents hold volumes across their boxes, with the sandboxes' checks (400 for
// bad paths, 404 for another account's volume, 409 VolumeBusy for a second writer), and the volume
// cannot be deleted while they hold it.
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import type { Nube } from '../../src/server.js';
import { type AgentNube, startAgentNube } from '../agents/helpers.js';
import {
  type SandboxNube,
  TEMPLATE_WAIT_MS,
  TEST_ROOT,
  startSandboxNube,
  stopSandboxNube,
} from '../sandboxes/helpers.js';
import { createRunning, type MachineNube, startMachineNube } from '../machines/helpers.js';

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
type Body = any;
type Call = (
  method: string,
  path: string,
  body?: unknown,
  key?: string,
) => Promise<{ status: number; body: Body }>;

async function execIn(call: Call, id: string, command: string): Promise<string> {
  const r = await call('POST', `/sandboxes/${id}/exec`, { command, timeoutSeconds: 60 });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body.exitCode, r.body.stderr).toBe(0);
  return r.body.stdout as string;
}

/** A data dir of its own: the store image in it is unmounted (dropStore) before it is removed. */
function dataDir(name: string): string {
  const dir = `${TEST_ROOT}/${name}-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  return dir;
}

async function dropStore(nube: Nube, dir: string, close: () => Promise<void>): Promise<void> {
  const runtime = nube.services.sandboxes.core.runtime as NamespacesRuntime;
  for (const s of await runtime.list().catch(() => [])) await runtime.destroy(s.id).catch(() => {});
  await close();
  await runtime.detachStore();
  rmSync(dir, { recursive: true, force: true });
}

/** A volume holding `greeting`, written by a sandbox that is gone again. */
async function volumeWithGreeting(call: Call, name: string): Promise<string> {
  const v = await call('POST', '/volumes', { name, sizeGB: 1 });
  expect(v.status, JSON.stringify(v.body)).toBe(201);
  const s = await call('POST', '/sandboxes', { volumes: [{ volumeId: v.body.id, path: '/v' }] });
  expect(s.status, JSON.stringify(s.body)).toBe(200);
  await execIn(call, s.body.id, 'echo hi > /v/greeting && sync');
  expect((await call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
  return v.body.id as string;
}

/** The bad inputs a holder of volumes answers as a sandbox does. */
async function refusesLikeSandboxes(
  call: Call,
  path: string,
  base: Record<string, unknown>,
  volumeId: string,
  foreign: string,
) {
  for (const volumes of [
    [{ volumeId, path: '/proc/x' }],
    [{ volumeId, path: '/.nube' }],
    [{ volumeId, path: 'relative' }],
    [
      { volumeId, path: '/a' },
      { volumeId: foreign, path: '/a/b' },
    ],
  ]) {
    const r = await call('POST', path, { ...base, volumes });
    expect(r.status, JSON.stringify(volumes)).toBe(400);
    expect(r.body.issues?.length).toBeGreaterThan(0);
  }
  const alien = await call('POST', path, { ...base, volumes: [{ volumeId: foreign, path: '/data' }] });
  expect(alien.status, JSON.stringify(alien.body)).toBe(404);
}

describe('volumes: a pooled sandbox takes them at its claim', () => {
  let t: SandboxNube;

  beforeAll(async () => {
    t = await startSandboxNube('vol-pool', {
      NUBE_SANDBOX_POOL: '1',
      NUBE_SANDBOX_CREATE_PER_MINUTE: '1000',
    });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (!t) return;
    for (const s of (await t.call('GET', '/sandboxes')).body?.sandboxes ?? [])
      await t.call('DELETE', `/sandboxes/${s.id}`);
    for (const v of (await t.call('GET', '/volumes')).body?.items ?? [])
      await t.call('DELETE', `/volumes/${v.id}`);
    await stopSandboxNube(t);
  }, 120_000);

  const hits = async () => {
    const st = await t.nube.services.sandboxes.core.pool.status();
    return st.keys.reduce((n, k) => n + k.hits, 0);
  };
  const poolReady = async () => {
    for (let i = 0; i < 300; i++) {
      const st = await t.nube.services.sandboxes.core.pool.status();
      if (st.keys.some((k) => k.ready > 0)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the pool never filled');
  };

  it('a create with volumes is a pool hit; the mounts are there, nosuid and nodev, read-only when asked, and come back after a suspend', async () => {
    const call: Call = (m, p, b) => t.call(m, p, b);
    const id = await volumeWithGreeting(call, 'pooled');
    await poolReady();
    const before = await hits();
    const w = await call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/home/user/work' }] });
    expect(w.status, JSON.stringify(w.body)).toBe(200);
    expect(await hits()).toBe(before + 1);
    expect(
      await execIn(
        call,
        w.body.id,
        'cat /home/user/work/greeting && echo more >> /home/user/work/greeting && cat /home/user/work/greeting',
      ),
    ).toBe('hi\nhi\nmore\n');
    const opts = await execIn(
      call,
      w.body.id,
      'awk \'$5 == "/home/user/work" {print $6}\' /proc/self/mountinfo',
    );
    expect(opts).toMatch(/nosuid/);
    expect(opts).toMatch(/nodev/);
    expect(opts).toMatch(/^rw/);
    // A second writer is still refused, and spends no pooled sandbox (it goes back to the pool).
    await poolReady();
    const hitsNow = await hits();
    const second = await call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('VolumeBusy');
    expect(await hits()).toBe(hitsNow);
    // A reader from the pool: the mount is read-only inside.
    const r = await call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/ro', readOnly: true }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(await hits()).toBe(hitsNow + 1);
    expect(await execIn(call, r.body.id, 'cat /ro/greeting; touch /ro/x 2>/dev/null; echo "rc=$?"')).toBe(
      'hi\nmore\nrc=1\n',
    );
    // The claimed mounts are the sandbox's: a suspend and resume starts it again with them.
    expect((await call('POST', `/sandboxes/${w.body.id}/suspend`)).status).toBe(200);
    expect((await call('POST', `/sandboxes/${w.body.id}/resume`)).status).toBe(200);
    expect(await execIn(call, w.body.id, 'cat /home/user/work/greeting')).toBe('hi\nmore\n');
    for (const s of [w, r]) expect((await call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
    expect((await call('DELETE', `/volumes/${id}`)).status).toBe(200);
  }, 300_000);
});

describe('volumes held by a machine', () => {
  let t: MachineNube;
  let other: string;
  let dir: string;

  beforeAll(async () => {
    dir = dataDir('machines-vol-hold');
    t = await startMachineNube(
      'vol-hold',
      'sqlite',
      { NUBE_SANDBOX_STORE: 'auto', NUBE_SANDBOX_CREATE_PER_MINUTE: '1000' },
      dir,
    );
    other = (await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' })).secret;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await dropStore(t.nube, dir, () => t.close());
  }, 120_000);

  it('the box mounts them; a second writer, bad paths, another account and a delete are refused until the machine goes', async () => {
    const call: Call = t.call;
    const id = await volumeWithGreeting(call, 'site');
    const foreign = (await call('POST', '/volumes', { name: 'theirs', sizeGB: 1 }, other)).body.id as string;
    await refusesLikeSandboxes(call, '/machines', { tier: 'micro' }, id, foreign);
    const promoted = await call('POST', '/machines', {
      tier: 'micro',
      fromSandboxId: 'sbx_nosuch',
      volumes: [{ volumeId: id, path: '/data' }],
    });
    expect(promoted.status).toBe(400);
    const launchExisting = await call('POST', '/machines/launch', {
      sandboxId: 'sbx_x',
      volumes: [{ volumeId: id, path: '/data' }],
    });
    expect(launchExisting.status).toBe(400);

    const m = await createRunning(t, { tier: 'micro', volumes: [{ volumeId: id, path: '/srv/data' }] });
    expect(m.volumes).toEqual([{ volumeId: id, path: '/srv/data', readOnly: false }]);
    expect(await execIn(call, m.sandboxId, 'cat /srv/data/greeting && echo box > /srv/data/box')).toBe(
      'hi\n',
    );
    const v = (await call('GET', `/volumes/${id}`)).body;
    expect(v.heldBy).toEqual([m.id]);
    expect(v.mounts.map((x: { sandboxId: string }) => x.sandboxId)).toEqual([m.sandboxId]);
    // The machine holds the writer slot: another writer is refused, a reader is not.
    const writer = await call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(writer.status).toBe(409);
    expect(writer.body.code).toBe('VolumeBusy');
    const otherMachine = await call('POST', '/machines', {
      tier: 'micro',
      volumes: [{ volumeId: id, path: '/data' }],
    });
    expect(otherMachine.status).toBe(409);
    expect(otherMachine.body.code).toBe('VolumeBusy');
    const reader = await call('POST', '/sandboxes', {
      volumes: [{ volumeId: id, path: '/data', readOnly: true }],
    });
    expect(reader.status, JSON.stringify(reader.body)).toBe(200);
    expect(await execIn(call, reader.body.id, 'cat /data/box')).toBe('box\n');
    expect((await call('DELETE', `/sandboxes/${reader.body.id}`)).status).toBe(200);
    // Held: no delete, even with its box gone underneath.
    const del = await call('DELETE', `/volumes/${id}`);
    expect(del.status).toBe(409);
    expect(del.body.code).toBe('VolumeInUse');
    expect(del.body.details?.heldBy ?? del.body.heldBy).toEqual([m.id]);
    // The box starting again (as after a host restart) binds it again.
    const runtime = t.nube.services.sandboxes.core.runtime;
    const rid = m.sandboxId.replace('_', '-');
    await runtime.suspend(rid);
    await runtime.resume(rid);
    expect(await execIn(call, m.sandboxId, 'cat /srv/data/box')).toBe('box\n');
    expect((await call('GET', `/machines/${m.id}`)).body.volumes).toEqual([
      { volumeId: id, path: '/srv/data', readOnly: false },
    ]);
    // The machine goes: the volume is free.
    expect((await call('DELETE', `/machines/${m.id}`)).status).toBe(200);
    expect((await call('GET', `/volumes/${id}`)).body).toMatchObject({ heldBy: [], mounts: [] });
    expect((await call('DELETE', `/volumes/${id}`)).status).toBe(200);
  }, 300_000);
});

describe('volumes held by an agent', () => {
  let t: AgentNube;
  let other: string;
  let dir: string;

  beforeAll(async () => {
    dir = dataDir('agents-vol-hold');
    t = await startAgentNube('vol-hold', {
      dataDir: dir,
      env: { NUBE_SANDBOX_STORE: 'auto', NUBE_SANDBOX_CREATE_PER_MINUTE: '1000' },
    });
    other = (await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' })).secret;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await dropStore(t.nube, dir, () => t.stop());
  }, 120_000);

  it('every box of the agent mounts them, across a revive; refused inputs as sandboxes; released at delete', async () => {
    const call: Call = t.call;
    const id = await volumeWithGreeting(call, 'notes');
    const foreign = (await call('POST', '/volumes', { name: 'theirs', sizeGB: 1 }, other)).body.id as string;
    await refusesLikeSandboxes(call, '/agents', { template: 'acp', env: {} }, id, foreign);

    const a = await t.agent({ volumes: [{ volumeId: id, path: '/mnt/notes' }] });
    expect(a.volumes).toEqual([{ volumeId: id, path: '/mnt/notes', readOnly: false }]);
    expect(await execIn(call, a.sandboxId, 'cat /mnt/notes/greeting && echo agent > /mnt/notes/agent')).toBe(
      'hi\n',
    );
    const second = await call('POST', '/agents', {
      template: 'acp',
      env: {},
      volumes: [{ volumeId: id, path: '/n' }],
    });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('VolumeBusy');
    // Its box goes; the agent still holds the volume, and its revived box mounts it again.
    expect((await call('DELETE', `/sandboxes/${a.sandboxId}`)).status).toBe(200);
    expect((await call('DELETE', `/volumes/${id}`)).status).toBe(409);
    const writer = await call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(writer.status).toBe(409);
    const revived = await call('POST', `/agents/${a.id}/revive`);
    expect(revived.status, JSON.stringify(revived.body)).toBe(200);
    expect(revived.body.sandboxId).not.toBe(a.sandboxId);
    expect(await execIn(call, revived.body.sandboxId, 'cat /mnt/notes/agent')).toBe('agent\n');
    expect((await call('DELETE', `/agents/${a.id}`)).status).toBe(200);
    expect((await call('GET', `/volumes/${id}`)).body).toMatchObject({ heldBy: [], mounts: [] });
    expect((await call('DELETE', `/volumes/${id}`)).status).toBe(200);
  }, 300_000);
});
