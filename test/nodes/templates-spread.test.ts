// An owner's image template on two nodes that do not share a templates dir (as two hosts): the node
// that built it puts its layers in the shared blob store (s3rver) by digest; the other node, given a
// sandbox of it, imports it from there (the same driver build, nothing pulled from the registry again,
// no build job) and runs a command in it. A Dockerfile template's step layers stay on the node that
// built it: a sandbox of it on the other node is a 501 in words.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type S3rverHandle, startS3rver } from '../../src/blob/s3rver-harness.js';
import { SANDBOX_ENV, TEST_ROOT } from '../sandboxes/helpers.js';
import { busyboxLayer, pushImage, type RunningRegistry, startFront, type FrontServer, startRegistry } from '../templates/registry.js';
import { type Cluster, startCluster, syncHeartbeats } from './cluster.js';

const AUTH = { username: 'me', password: 'pw' };

describe('templates across nodes', () => {
  let c: Cluster;
  let s3: S3rverHandle;
  let reg: RunningRegistry;
  /** Docker Hub's token flow in front of the registry: its token requests count the pulls. */
  let front: FrontServer;
  const s3dir = mkdtempSync(join(tmpdir(), 'nube-tplnodes-s3-'));
  const root = join(TEST_ROOT, `tplnodes-${process.pid}`);
  const tplDir = (i: number) => join(root, `templates${i}`);

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(reg.host, 'test/bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }], { Env: ['PATH=/bin'] });
    front = await startFront(reg.origin, { token: AUTH });
    s3 = await startS3rver(s3dir, ['nube-tpl']);
    mkdirSync(root, { recursive: true });
    c = await startCluster({
      count: 2,
      dataRoot: root,
      env: (i) => ({
        ...SANDBOX_ENV,
        NUBE_TEMPLATES_DIR: tplDir(i),
        NUBE_SANDBOX_BRIDGE: `nubtn${i}:10.${170 + i}.0.1/16`,
        NUBE_SANDBOX_CGROUP: `nube-tplnodes-${i}`,
        NUBE_RAW_PORTS: `${41500 + i * 20}-${41519 + i * 20}`,
        NUBE_LLM_GATEWAY_PORT: '0',
        NUBE_TEMPLATE_REGISTRY_ALLOW: front.origin,
        NUBE_BLOB_BACKEND: 's3',
        NUBE_S3_ENDPOINT: s3.endpoint,
        NUBE_S3_BUCKET: 'nube-tpl',
        NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
        NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      }),
    });
    await syncHeartbeats(c);
  }, 300_000);

  afterAll(async () => {
    if (c) {
      for (const i of [0, 1]) {
        for (const s of (await c.call('GET', '/sandboxes', undefined, i)).body?.sandboxes ?? []) await c.call('DELETE', `/sandboxes/${s.id}`, undefined, i);
      }
      for (const n of c.nodes) {
        const rt = n.nube.services.sandboxes.core.runtime;
        for (const s of await rt.list().catch(() => [])) await rt.destroy(s.id).catch(() => {});
      }
      for (const x of (await c.call('GET', '/templates', undefined, 0)).body?.templates ?? []) await c.call('DELETE', `/templates/${x.id}`, undefined, 0);
      await c.close();
    }
    await s3?.stop();
    await front?.close();
    reg?.stop();
    rmSync(s3dir, { recursive: true, force: true });
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  const waitReady = async (id: string) => {
    for (let i = 0; i < 600; i++) {
      const g = await c.call('GET', `/templates/${id}`, undefined, 0);
      if (g.body.status !== 'building') return g.body;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error('build did not end');
  };

  it("a node without an image template's layers imports them from the blob store by digest, not from the registry", async () => {
    const t = await c.call('POST', '/templates', { name: 'spread', fromImage: `${front.host}/test/bb:v1`, registryAuth: AUTH, env: { SPREAD: 'yes' } }, 0);
    expect(t.status, JSON.stringify(t.body)).toBe(200);
    const built = await waitReady(t.body.id);
    expect(built.status, JSON.stringify(built)).toBe('ready');
    // Built by whichever node leased the job; the other has nothing of it.
    const holder = [0, 1].find((i) => existsSync(`${tplDir(i)}/${t.body.id}/current`))!;
    const other = 1 - holder;
    expect(existsSync(`${tplDir(other)}/${t.body.id}`)).toBe(false);
    const logs = await (await fetch(`${c.nodes[0]!.baseUrl}/api/v2/templates/${t.body.id}/build-logs`, { headers: { authorization: `Bearer ${c.ownerKey}` } })).text();
    expect(logs).toContain('layers in the blob store for other nodes: 1 copied, 0 there already');
    const tokensBefore = front.tokenRequests;
    expect(tokensBefore).toBeGreaterThan(0);

    // Only the other node takes sandboxes now.
    await c.nodes[0]!.nube.deps.nodes.setState(c.nodes[holder]!.nube.deps.nodes.id, 'cordoned');
    await syncHeartbeats(c);
    const s = await c.call('POST', '/sandboxes', { template: 'spread' }, holder);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const r = await c.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'echo "$SPREAD"; readlink /bin/sh' }, other);
    expect(r.body).toMatchObject({ stdout: 'yes\nbusybox\n', exitCode: 0 });
    // The same driver build as on the node that built it.
    const build = (i: number) => readFileSync(`${tplDir(i)}/${t.body.id}/current`, 'utf8');
    expect(build(other)).toBe(build(holder));
    expect(front.tokenRequests).toBe(tokensBefore);
    expect((await c.call('DELETE', `/sandboxes/${s.body.id}`, undefined, other)).status).toBe(200);

    // A Dockerfile's steps are the building node's snapshots.
    const d = await c.call('POST', '/templates', { name: 'steps', dockerfile: `FROM ${front.host}/test/bb:v1\nRUN echo x > /x`, registryAuth: AUTH }, other);
    // Its build runs on whichever node leases the job.
    const db = await waitReady(d.body.id);
    expect(db.status, JSON.stringify(db)).toBe('ready');
    const dHolder = [0, 1].find((i) => existsSync(`${tplDir(i)}/${d.body.id}/current`))!;
    await c.nodes[0]!.nube.deps.nodes.setState(c.nodes[holder]!.nube.deps.nodes.id, 'active');
    await c.nodes[0]!.nube.deps.nodes.setState(c.nodes[dHolder]!.nube.deps.nodes.id, 'cordoned');
    await syncHeartbeats(c);
    const ds = await c.call('POST', '/sandboxes', { template: 'steps' }, 0);
    expect(ds.status, JSON.stringify(ds.body)).toBe(501);
    expect(ds.body.code).toBe('NotImplemented');
    expect(ds.body.error).toContain('Dockerfile template steps');
    await c.nodes[0]!.nube.deps.nodes.setState(c.nodes[dHolder]!.nube.deps.nodes.id, 'active');
  }, 600_000);
});
