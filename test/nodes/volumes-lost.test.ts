// Issue 33 item 1, a node's death: two nodes on one PostgreSQL and one S3 (s3rver). A volume on node
// 1 is backed up (the request reaches node 0 and is relayed), then node 1 stops beating: the volume is
// `lost`, mounts and changes answer 409 VolumeLost naming its last backup, and that backup restores
// onto node 0 with the files it held when it was taken.
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { type S3rverHandle, startS3rver } from '../../src/blob/s3rver-harness.js';
import { SANDBOX_ENV, TEST_ROOT, until } from '../sandboxes/helpers.js';
import { type Cluster, startCluster, waitDown } from './cluster.js';

describe('a volume whose node dies', () => {
  let c: Cluster;
  let s3: S3rverHandle;
  const root = join(TEST_ROOT, `nodes-vol-${process.pid}`);
  const runtime = (i: number) => c.nodes[i]!.nube.services.sandboxes.core.runtime as NamespacesRuntime;

  beforeAll(async () => {
    mkdirSync(join(root, 's3'), { recursive: true });
    s3 = await startS3rver(join(root, 's3'), ['nube-vols']);
    c = await startCluster({
      count: 2,
      dataRoot: root,
      env: (i) => ({
        ...SANDBOX_ENV,
        NUBE_SANDBOX_STORE: 'auto',
        NUBE_SANDBOX_BRIDGE: `nubvl${i}:10.${160 + i}.0.1/16`,
        NUBE_SANDBOX_CGROUP: `nube-volnodes-${i}`,
        NUBE_RAW_PORTS: `${41200 + i * 20}-${41219 + i * 20}`,
        NUBE_LLM_GATEWAY_PORT: '0',
        NUBE_BLOB_BACKEND: 's3',
        NUBE_S3_ENDPOINT: s3.endpoint,
        NUBE_S3_BUCKET: 'nube-vols',
        NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
        NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      }),
    });
  }, 120_000);

  afterAll(async () => {
    if (c) {
      for (const v of (await c.call('GET', '/volumes', undefined, 0)).body?.items ?? []) {
        for (const b of (await c.call('GET', `/volumes/${v.id}/backups`, undefined, 0)).body?.items ?? [])
          await c.call('DELETE', `/volume-backups/${b.id}`, undefined, 0);
        await c.call('DELETE', `/volumes/${v.id}`, undefined, 0);
      }
      // The dead node's volume is still on its store: it goes with the store's image.
      await c.close();
      for (let i = 0; i < c.nodes.length; i++)
        await runtime(i)
          .detachStore()
          .catch(() => {});
    }
    // This suite's bridges and their nft tables (made at start even with no sandbox).
    for (const i of [0, 1]) {
      for (const [cmd, ...args] of [
        ['ip', 'link', 'del', `nubvl${i}`],
        ['nft', 'delete', 'table', 'inet', `nube_nubvl${i}`],
      ] as const) {
        try {
          execFileSync(cmd, args, { stdio: 'pipe' });
        } catch {}
      }
      rmSync(`/run/nube-net/nubvl${i}`, { recursive: true, force: true });
    }
    await s3?.stop();
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it('is lost with its last backup named, and that backup restores onto the other node', async () => {
    const v = await c.call('POST', '/volumes', { name: 'work', sizeGB: 1 }, 1);
    expect(v.status, JSON.stringify(v.body)).toBe(201);
    expect(v.body.nodeId).toBe('node-1');
    // Files written on node 1's store as a sandbox's root would (owner: the store's uid base).
    const dir = await runtime(1).volumes.path(v.body.id);
    const uid = runtime(1).volumes.uidBase;
    mkdirSync(join(dir, 'sub'));
    writeFileSync(join(dir, 'sub', 'hello'), 'hello from node 1\n');
    chownSync(join(dir, 'sub'), uid, uid);
    chownSync(join(dir, 'sub', 'hello'), uid + 1000, uid + 1000);

    const b = await c.call('POST', `/volumes/${v.body.id}/backups`, undefined, 0);
    expect(b.status, JSON.stringify(b.body)).toBe(201);
    expect(b.body.nodeId).toBe('node-1');
    const done = await until(
      () => c.call('GET', `/volume-backups/${b.body.id}`, undefined, 0),
      (r) => r.body?.status !== 'running',
      60_000,
    );
    expect(done.body.status, JSON.stringify(done.body)).toBe('completed');
    // Written after the backup: not in what is restored.
    writeFileSync(join(dir, 'later'), 'after the backup\n');

    // Node 1 stops beating: the other node takes it for dead.
    c.nodes[1]!.nube.deps.nodes.stop();
    await waitDown(c, 'node-1');
    const got = await c.call('GET', `/volumes/${v.body.id}`, undefined, 0);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ status: 'lost', lastBackupId: b.body.id, usedBytes: null });
    expect(got.body.error).toContain(b.body.id);
    expect(got.body.error).toContain('node-1');
    const listed = await c.call('GET', '/volumes', undefined, 0);
    expect(listed.body.items.find((x: { id: string }) => x.id === v.body.id).status).toBe('lost');
    const mount = await c.call(
      'POST',
      '/sandboxes',
      { volumes: [{ volumeId: v.body.id, path: '/data' }] },
      0,
    );
    expect(mount.status, JSON.stringify(mount.body)).toBe(409);
    expect(mount.body).toMatchObject({ code: 'VolumeLost', lastBackupId: b.body.id, volumeId: v.body.id });
    expect(mount.body.error).toMatch(new RegExp(`lost .*last backup ${b.body.id}`));
    for (const [method, path, body] of [
      ['POST', `/volumes/${v.body.id}/backups`, undefined],
      ['PATCH', `/volumes/${v.body.id}`, { sizeGB: 2 }],
      ['POST', `/volumes/${v.body.id}/snapshot`, undefined],
      ['POST', '/volumes', { name: 'copy', fromVolumeId: v.body.id }],
    ] as const) {
      const r = await c.call(method, path, body, 0);
      expect(r.status, `${method} ${path}`).toBe(409);
      expect(r.body.code).toBe('VolumeLost');
    }
    // Its backups are still listed.
    const backups = await c.call('GET', `/volumes/${v.body.id}/backups`, undefined, 0);
    expect(backups.body.items.map((x: { id: string }) => x.id)).toEqual([b.body.id]);

    const r = await c.call('POST', '/volumes', { name: 'work-again', fromBackupId: b.body.id }, 0);
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body.nodeId).toBe('node-0');
    const ready = await until(
      () => c.call('GET', `/volumes/${r.body.id}`, undefined, 0),
      (x) => x.body?.status !== 'restoring',
      60_000,
    );
    expect(ready.body.status, JSON.stringify(ready.body)).toBe('ready');
    const back = await runtime(0).volumes.path(r.body.id);
    expect(readFileSync(join(back, 'sub', 'hello'), 'utf8')).toBe('hello from node 1\n');
    expect(statSync(join(back, 'sub', 'hello')).uid).toBe(runtime(0).volumes.uidBase + 1000);
    expect(statSync(join(back, 'sub')).uid).toBe(runtime(0).volumes.uidBase);
    expect(existsSync(join(back, 'later'))).toBe(false);

    // The lost volume's record can be deleted; its backup stays.
    expect((await c.call('DELETE', `/volumes/${v.body.id}`, undefined, 0)).status).toBe(200);
    expect((await c.call('GET', `/volumes/${v.body.id}`, undefined, 0)).status).toBe(404);
    expect((await c.call('GET', `/volume-backups/${b.body.id}`, undefined, 0)).body.status).toBe('completed');
  }, 180_000);
});
