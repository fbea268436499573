// Issue 33 item 1 through the API: volumes are made with a limit, mounted into sandboxes (one writer,
// any number of readers), outlive them, refuse bad mount paths, another account's volume, a second
// writer, a resize below what they hold and a delete while mounted; the limit holds inside the sandbox.
// Copies (from a volume, from a snapshot) share blocks. On SQLite and PostgreSQL, on both drivers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import {
  DRIVERS,
  type SandboxNube,
  TEMPLATE_WAIT_MS,
  startSandboxNube,
  stopSandboxNube,
} from '../sandboxes/helpers.js';

const MB = 1024 * 1024;
const cases = DIALECTS.flatMap((d) =>
  DRIVERS.filter((v) => d === 'sqlite' || v === 'namespaces').map((v) => [d, v] as const),
);

describe.each(cases)('%s, %s: volumes through the API', (dialect, driver) => {
  let t: SandboxNube;
  let other: Record<string, string>;

  beforeAll(async () => {
    t = await startSandboxNube(
      `vol-${dialect}`,
      { NUBE_SANDBOX_DRIVER: driver, NUBE_SANDBOX_CREATE_PER_MINUTE: '1000' },
      undefined,
      { dialect },
    );
    const acct = await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' });
    other = { authorization: `Bearer ${acct.secret}` };
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (!t) return;
    await stopVolumes(t);
    await stopSandboxNube(t);
  }, 120_000);

  async function stopVolumes(n: SandboxNube) {
    for (const s of (await n.call('GET', '/sandboxes')).body?.sandboxes ?? [])
      await n.call('DELETE', `/sandboxes/${s.id}`);
    for (const v of (await n.call('GET', '/volumes')).body?.items ?? []) {
      for (const s of (await n.call('GET', `/volumes/${v.id}/snapshots`)).body?.items ?? [])
        await n.call('DELETE', `/volume-snapshots/${s.id}`);
      await n.call('DELETE', `/volumes/${v.id}`);
    }
  }

  const exec = async (id: string, command: string) => {
    const r = await t.call('POST', `/sandboxes/${id}/exec`, { command, timeoutSeconds: 120 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };

  it('a file written through one sandbox is read by the next; one writer, many readers', async () => {
    const v = await t.call('POST', '/volumes', { name: 'work', sizeGB: 1 });
    expect(v.status, JSON.stringify(v.body)).toBe(201);
    expect(v.body).toMatchObject({ name: 'work', sizeGB: 1, usedBytes: 0, mounts: [] });
    const id = v.body.id;
    const a = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    const w = await exec(
      a.body.id,
      'echo hello > /data/greeting && head -c 3000000 /dev/urandom > /data/blob && sync && ls -ln /data | wc -l',
    );
    expect(w.exitCode, w.stderr).toBe(0);
    // A second writer is refused; readers are not.
    const b = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(b.status).toBe(409);
    expect(b.body.code).toBe('VolumeBusy');
    const r1 = await t.call('POST', '/sandboxes', {
      volumes: [{ volumeId: id, path: '/mnt/in', readOnly: true }],
    });
    const r2 = await t.call('POST', '/sandboxes', {
      volumes: [{ volumeId: id, path: '/srv', readOnly: true }],
    });
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect((await exec(r1.body.id, 'cat /mnt/in/greeting')).stdout).toBe('hello\n');
    const ro = await exec(
      r2.body.id,
      'touch /srv/nope 2>&1; echo "rc=$?"; rm -f /srv/greeting 2>&1; echo "rc=$?"',
    );
    expect(ro.stdout).toMatch(/^touch: .*Read-only file system\nrc=1\nrm: .*Read-only file system\nrc=1\n$/);
    const got = await t.call('GET', `/volumes/${id}`);
    expect(got.body.usedBytes).toBeGreaterThanOrEqual(3_000_000);
    expect(got.body.mounts.map((m: { sandboxId: string }) => m.sandboxId).sort()).toEqual(
      [a.body.id, r1.body.id, r2.body.id].sort(),
    );
    // Deleting a mounted volume is refused.
    const del = await t.call('DELETE', `/volumes/${id}`);
    expect(del.status).toBe(409);
    expect(del.body.code).toBe('VolumeInUse');
    // The writer goes: the next writer reads what it wrote, and may write.
    expect((await t.call('DELETE', `/sandboxes/${a.body.id}`)).status).toBe(200);
    const c = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/home/me/work' }] });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const read = await exec(
      c.body.id,
      'cat /home/me/work/greeting && stat -c %s /home/me/work/blob && echo more >> /home/me/work/greeting && id -u && stat -c %u /home/me/work',
    );
    expect(read.stdout).toBe('hello\n3000000\n0\n0\n');
    // The file survives suspend and resume of the sandbox (the mount comes back with it).
    expect((await t.call('POST', `/sandboxes/${c.body.id}/suspend`)).status).toBe(200);
    expect((await t.call('POST', `/sandboxes/${c.body.id}/resume`)).status).toBe(200);
    expect((await exec(c.body.id, 'cat /home/me/work/greeting')).stdout).toBe('hello\nmore\n');
    for (const s of [c, r1, r2]) expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
    expect((await t.call('DELETE', `/volumes/${id}`)).status).toBe(200);
    expect((await t.call('GET', `/volumes/${id}`)).status).toBe(404);
  }, 300_000);

  it('the limit holds inside the sandbox; resize grows it, never below what it holds', async () => {
    const v = await t.call('POST', '/volumes', { name: 'small', sizeGB: 1 });
    const id = v.body.id;
    const s = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    expect(s.status).toBe(200);
    const fill = await exec(
      s.body.id,
      'dd if=/dev/zero of=/data/fill bs=1M count=1200 2>&1; echo "rc=$?"; sync; du -sm /data/fill',
    );
    expect(fill.stdout).toMatch(/No space left on device|Disk quota exceeded/);
    expect(fill.stdout).toContain('rc=1');
    const wrote = Number(fill.stdout.trim().split('\n').at(-1)!.split(/\s+/)[0]);
    expect(wrote).toBeGreaterThan(900);
    expect(wrote).toBeLessThanOrEqual(1024);
    const small = await t.call('PATCH', `/volumes/${id}`, { sizeGB: 1 });
    expect(small.status).toBe(200);
    await exec(s.body.id, 'rm /data/fill; head -c 1048576 /dev/zero > /data/one; sync');
    const grown = await t.call('PATCH', `/volumes/${id}`, { sizeGB: 2 });
    expect(grown.status).toBe(200);
    expect(grown.body.sizeGB).toBe(2);
    const more = await exec(
      s.body.id,
      'dd if=/dev/zero of=/data/fill bs=1M count=1300 >/dev/null 2>&1; echo "rc=$?"',
    );
    expect(more.stdout).toBe('rc=0\n');
    // Now it holds more than 1 GiB: 1 is below what it holds.
    await exec(s.body.id, 'sync');
    const below = await t.call('PATCH', `/volumes/${id}`, { sizeGB: 1 });
    expect(below.status).toBe(400);
    expect(below.body.code).toBe('VolumeTooSmall');
    expect(below.body.issues[0].path).toContain('sizeGB');
    expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
    expect((await t.call('DELETE', `/volumes/${id}`)).status).toBe(200);
  }, 300_000);

  it("bad mount paths are 400, another account's volume 404, a bad volume 400", async () => {
    const v = await t.call('POST', '/volumes', { name: 'paths', sizeGB: 1 });
    const id = v.body.id;
    const bad = [
      '/proc',
      '/proc/x',
      '/sys/fs',
      '/dev',
      '/.nube',
      '/',
      'data',
      '/a/../b',
      '/a/./b',
      '/a//b',
      '/a/',
    ];
    for (const path of bad) {
      const r = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path }] });
      expect(r.status, path).toBe(400);
      expect(r.body.issues[0].path, path).toEqual(['body', 'volumes', 0, 'path']);
    }
    const v2 = await t.call('POST', '/volumes', { name: 'second', sizeGB: 1 });
    const overlap = await t.call('POST', '/sandboxes', {
      volumes: [
        { volumeId: id, path: '/data' },
        { volumeId: v2.body.id, path: '/data/inner', readOnly: true },
      ],
    });
    expect(overlap.status).toBe(400);
    expect(overlap.body.issues[0].path).toEqual(['body', 'volumes', 1, 'path']);
    const twice = await t.call('POST', '/sandboxes', {
      volumes: [
        { volumeId: id, path: '/a', readOnly: true },
        { volumeId: id, path: '/b', readOnly: true },
      ],
    });
    expect(twice.status).toBe(400);
    const theirs = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] }, other);
    expect(theirs.status).toBe(404);
    expect((await t.call('GET', `/volumes/${id}`, undefined, other)).status).toBe(404);
    expect((await t.call('DELETE', `/volumes/${id}`, undefined, other)).status).toBe(404);
    expect((await t.call('GET', '/volumes', undefined, other)).body.items).toEqual([]);
    for (const body of [{ name: 'x' }, { name: 'x', sizeGB: 0 }, { name: 'x', sizeGB: 1.5 }, { sizeGB: 1 }]) {
      const r = await t.call('POST', '/volumes', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.issues.length).toBeGreaterThan(0);
    }
    // A path under a file of the image is refused by the driver (no mount through a file or symlink).
    const file = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/etc/hostname/x' }] });
    expect(file.status).toBe(400);
    // Nothing is left holding the volume after refused creates.
    expect((await t.call('GET', `/volumes/${id}`)).body.mounts).toEqual([]);
  }, 300_000);

  it('MCP: volumes_create, volumes_get and volumes_delete are tools; a mount of a sandbox gone is released at start', async () => {
    const mcp = async (name: string, args: unknown) => {
      const r = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: {
          ...t.auth,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name, arguments: args },
        }),
      });
      return ((await r.json()) as { result: { isError?: boolean; content: { text: string }[] } }).result;
    };
    const made = await mcp('volumes_create', { name: 'by-mcp', sizeGB: 1 });
    expect(made.isError, made.content[0]?.text).toBeFalsy();
    const vol = JSON.parse(made.content[0]!.text);
    const got = JSON.parse((await mcp('volumes_get', { volumeId: vol.id })).content[0]!.text);
    expect(got).toMatchObject({ id: vol.id, name: 'by-mcp', usedBytes: 0 });
    // A mount whose sandbox record is gone (removed while nube was down) holds the volume until the sweep.
    const svc = t.nube.services.volumes;
    const owner = (await t.nube.deps.auth.authenticate({ authorization: t.auth.authorization }, ['owner']))
      .ownerId;
    await svc.attach(owner, 'sbx_gone', [{ volumeId: vol.id, path: '/data', readOnly: false }]);
    expect((await t.call('DELETE', `/volumes/${vol.id}`)).status).toBe(409);
    expect(await svc.sweep(async (id) => id !== 'sbx_gone')).toBe(1);
    const del = await mcp('volumes_delete', { volumeId: vol.id });
    expect(del.isError, del.content[0]?.text).toBeFalsy();
    expect((await t.call('GET', `/volumes/${vol.id}`)).status).toBe(404);
  });

  it('a copy of a volume or of a snapshot has its files and goes its own way', async () => {
    const v = await t.call('POST', '/volumes', { name: 'src', sizeGB: 2 });
    const id = v.body.id;
    const s = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: id, path: '/data' }] });
    await exec(s.body.id, 'echo one > /data/f && head -c 50000000 /dev/urandom > /data/big && sync');
    const snap = await t.call('POST', `/volumes/${id}/snapshot`);
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    await exec(s.body.id, 'echo two > /data/f && sync');
    const started = performance.now();
    const copy = await t.call('POST', '/volumes', { name: 'copy', fromVolumeId: id });
    const forkMs = performance.now() - started;
    expect(copy.status, JSON.stringify(copy.body)).toBe(201);
    expect(copy.body.sizeGB).toBe(2);
    expect(copy.body.sourceId).toBe(id);
    const fromSnap = await t.call('POST', '/volumes', {
      name: 'old',
      fromSnapshotId: snap.body.id,
      sizeGB: 1,
    });
    expect(fromSnap.status).toBe(201);
    const k = await t.call('POST', '/sandboxes', {
      volumes: [
        { volumeId: copy.body.id, path: '/copy' },
        { volumeId: fromSnap.body.id, path: '/old' },
        { volumeId: id, path: '/src', readOnly: true },
      ],
    });
    expect(k.status, JSON.stringify(k.body)).toBe(200);
    const r = await exec(
      k.body.id,
      'cat /copy/f /old/f; cmp /copy/big /old/big && echo same; echo three > /copy/f; cat /src/f',
    );
    expect(r.stdout).toBe('two\none\nsame\ntwo\n');
    expect(
      (await t.call('GET', `/volumes/${id}/snapshots`)).body.items.map((x: { id: string }) => x.id),
    ).toEqual([snap.body.id]);
    const tooSmall = await t.call('POST', '/volumes', { name: 'tiny', fromVolumeId: id, sizeGB: 1 });
    expect(tooSmall.status).toBe(201); // 50 MB fit in 1 GiB
    console.log(`[volumes] copy of a volume holding 50 MB: ${forkMs.toFixed(1)} ms through the API`);
  }, 300_000);
});

describe('volume mount paths', () => {
  it('needs no sandbox: overlaps and reserved paths', async () => {
    const { mountPathProblem, overlappingMounts } = await import(
      '../../src/areas/sandboxes/volume-binder.js'
    );
    expect(mountPathProblem('/data')).toBeNull();
    expect(mountPathProblem('/devices')).toBeNull();
    expect(mountPathProblem('/dev/shm')).toMatch(/\/dev/);
    expect(mountPathProblem('/')).not.toBeNull();
    expect(overlappingMounts(['/a', '/ab', '/a/b', '/c'])).toEqual([[0, 2]]);
    expect(MB).toBe(1048576);
  });
});
