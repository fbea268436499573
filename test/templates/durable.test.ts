// Template builds as durable jobs: a nube killed (SIGKILL) in the middle of a Dockerfile build is
// started again on the same data dir and database, and the build goes on from the steps it had done
// (cached layers) to ready, and a sandbox of it runs (on each driver). Builds that fail say why in
// words: an unknown image or tag, a registry refusing the credentials (Docker Hub's token flow), a
// registry whose blob bytes do not match their digest (nothing kept). Templates count in the plan's
// storage: an image past what is left of it fails the build, and a create with none left is a 402.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../../src/areas/sandboxes/runtime/namespaces/proc.js';
import { type NubeProcess, nubeProcess } from '../helpers/nube-process.js';
import {
  DRIVERS,
  SANDBOX_ENV,
  type SandboxNube,
  startSandboxNube,
  stopSandboxNube,
  TEST_ROOT,
} from '../sandboxes/helpers.js';
import {
  busyboxLayer,
  dropTemplates,
  type FrontServer,
  pushImage,
  type RunningRegistry,
  startFront,
  startRegistry,
  tarOf,
  waitBuilt,
} from './registry.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(DRIVERS)('%s: a template build survives a restart of nube', (driver) => {
  let reg: RunningRegistry;
  let n: NubeProcess;

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(reg.host, 'test/bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }], { Env: ['PATH=/bin'] });
    n = await nubeProcess('sqlite', `${TEST_ROOT}/api-durable-${driver}-${process.pid}`, {
      ...SANDBOX_ENV,
      NUBE_SANDBOX_DRIVER: driver,
      NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin,
    });
    await n.start();
  }, 600_000);

  afterAll(async () => {
    if (n?.running) {
      for (const s of (await n.call('GET', '/sandboxes')).body?.sandboxes ?? []) await n.call('DELETE', `/sandboxes/${s.id}`);
      await dropTemplates(n);
    }
    await n?.close();
    reg?.stop();
  }, 120_000);

  it('killed in the middle of a RUN step, the build goes on in the next nube from its cached steps to ready', async () => {
    const dockerfile = [
      `FROM ${reg.host}/test/bb:v1`,
      'RUN echo one > /one',
      'RUN echo two > /two',
      'RUN sleep 8 && echo three > /three',
      'RUN echo four > /four',
    ].join('\n');
    const c = await n.call('POST', '/templates', { name: 'durable', dockerfile });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const id = c.body.id as string;
    // Until the sleeping step runs: the two before it are layers.
    const end = Date.now() + 300_000;
    for (;;) {
      const g = await n.call('GET', `/templates/${id}`);
      expect(g.body.status, JSON.stringify(g.body)).toBe('building');
      if (g.body.phase === 'building' && g.body.progress.stepsDone >= 2) break;
      expect(Date.now()).toBeLessThan(end);
      await sleep(100);
    }
    await sleep(1000);
    await n.stop('SIGKILL');
    // As an import the killed nube had under way: its half-made build (a pid that is gone) goes.
    let dead = 4_000_000;
    while (isAlive(dead)) dead--;
    const half = `${TEST_ROOT}/templates/${id}/0123456789abcdef.building-${dead}`;
    mkdirSync(`${half}/rootfs/etc`, { recursive: true });
    await n.start();

    const built = await waitBuilt(n, id, 300_000);
    expect(built, JSON.stringify(built)).toMatchObject({ status: 'ready', phase: 'done', errorCode: null });
    const logs = await (await fetch(`${n.base}/api/v2/templates/${id}/build-logs`, { headers: { authorization: `Bearer ${n.ownerKey}` } })).text();
    expect(logs).toMatch(/step 1\/4: RUN echo one > \/one \(cached\)/);
    expect(logs).toMatch(/step 2\/4: RUN echo two > \/two \(cached\)/);
    expect(logs).toContain('2 steps built, 2 cached');
    // Nothing half-made of the killed process is left beside the build.
    expect(existsSync(half)).toBe(false);
    expect(readdirSync(`${TEST_ROOT}/templates/${id}`).filter((e) => e.includes('.building-'))).toEqual([]);

    const s = await n.call('POST', '/sandboxes', { template: 'durable' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const r = await n.call('POST', `/sandboxes/${s.body.id}/exec`, { command: 'cat /one /two /three /four' });
    expect(r.body).toMatchObject({ stdout: 'one\ntwo\nthree\nfour\n', exitCode: 0 });
    expect((await n.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
    expect((await n.call('DELETE', `/templates/${id}`)).status).toBe(200);
    expect(existsSync(`${TEST_ROOT}/templates/${id}`)).toBe(false);
  }, 900_000);
});

describe('template build failures in words, and the plan storage', () => {
  let reg: RunningRegistry;
  let hub: FrontServer;
  let liar: FrontServer;
  let t: SandboxNube;

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(reg.host, 'test/bb', 'v1', [{ tar: await busyboxLayer(), compression: 'gzip' }], { Env: ['PATH=/bin'] });
    // Its own bytes (random: the front alters blobs past 600 bytes), so no layer of it is in nube's blob store from another pull.
    pushImage(reg.host, 'test/lied', 'v1', [{ tar: await tarOf([{ name: 'etc/lied', content: randomBytes(5000) }]), compression: 'gzip' }]);
    // 120 MiB of zeros (a few hundred KiB gzipped): past the byte plan's 100 MiB of storage.
    pushImage(reg.host, 'test/big', 'v1', [{ tar: await tarOf([{ name: 'big', zeros: 120 * 1024 * 1024 }]), compression: 'gzip' }]);
    hub = await startFront(reg.origin, { token: { username: 'me', password: 'right' } });
    liar = await startFront(reg.origin, { lie: true });
    t = await startSandboxNube(
      'build-failures',
      {
        NUBE_TEMPLATE_REGISTRY_ALLOW: [reg.origin, hub.origin, liar.origin].join(','),
        NUBE_OWNER_PLAN: 'byte',
      },
      undefined,
      { templates: [] },
    );
  }, 300_000);

  afterAll(async () => {
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    await hub?.close();
    await liar?.close();
    reg?.stop();
  }, 120_000);

  const failed = async (body: Record<string, unknown>) => {
    const c = await t.call('POST', '/templates', body);
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const b = await waitBuilt(t, c.body.id);
    expect(b.status, JSON.stringify(b)).toBe('failed');
    return b;
  };

  it('an unknown image or tag, refused credentials and a lying registry fail the build in words; nothing of the lie is kept', async () => {
    const tag = await failed({ name: 'no-tag', fromImage: `${reg.host}/test/bb:nope` });
    expect(tag).toMatchObject({ errorCode: 'ImageNotFound', phase: 'failed' });
    expect(tag.error).toBe(`image ${reg.host}/test/bb:nope not found (no such repository or tag)`);
    const repo = await failed({ name: 'no-repo', fromImage: `${reg.host}/nobody/nothing:v1` });
    expect(repo.errorCode).toBe('ImageNotFound');
    expect(repo.error).toContain('not found');

    // Docker Hub's flow: 401 with a Bearer challenge, a token for the right Basic credentials.
    const wrong = await failed({
      name: 'wrong-auth',
      fromImage: `${hub.host}/test/bb:v1`,
      registryAuth: { username: 'me', password: 'wrong' },
    });
    expect(wrong.errorCode).toBe('AuthRefused');
    expect(wrong.error).toMatch(/refused|credentials/i);
    const none = await failed({ name: 'no-auth', fromImage: `${hub.host}/test/bb:v1` });
    expect(none.errorCode).toBe('AuthRefused');
    const right = await t.call('POST', '/templates', {
      name: 'right-auth',
      fromImage: `${hub.host}/test/bb:v1`,
      registryAuth: { username: 'me', password: 'right' },
    });
    expect((await waitBuilt(t, right.body.id)).status).toBe('ready');
    expect(hub.tokenRequests).toBeGreaterThanOrEqual(3);
    // The password is never shown back.
    expect(JSON.stringify((await t.call('GET', `/templates/${right.body.id}`)).body)).not.toContain('right"');

    const lied = await failed({ name: 'lied', fromImage: `${liar.host}/test/lied:v1` });
    expect(lied.errorCode).toBe('DigestMismatch');
    expect(lied.error).toMatch(/^layer sha256:[0-9a-f]{64} from .* has digest sha256:[0-9a-f]{64} \(\d+ bytes\): refused, nothing kept$/);
    const blobs = t.nube.services.templates.registry;
    for (const l of lied.layers as { digest: string }[]) expect(existsSync(blobs.blobPath(l.digest))).toBe(false);
    expect(existsSync(`${TEST_ROOT}/templates/${lied.id}`)).toBe(false);
    const logs = await (await fetch(`${t.baseUrl}/api/v2/templates/${lied.id}/build-logs`, { headers: t.auth })).text();
    expect(logs).toContain('build failed: layer sha256:');
    expect(logs).toMatch(/event: done\ndata: \{"status":"failed","error":"layer sha256:[^"]*","errorCode":"DigestMismatch"\}/);
    for (const x of [tag, repo, wrong, none, lied]) expect((await t.call('DELETE', `/templates/${x.id}`)).status).toBe(200);
    expect((await t.call('DELETE', `/templates/${right.body.id}`)).status).toBe(200);
  }, 300_000);

  it("templates count in the plan's storage: an image past what is left fails its build, and none left is a 402", async () => {
    const before = (await t.call('GET', '/account/usage')).body.storageBytes;
    expect(before.limit).toBe(100 * 1024 * 1024);

    const big = await failed({ name: 'big', fromImage: `${reg.host}/test/big:v1` });
    expect(big.errorCode).toBe('StorageQuotaExceeded');
    expect(big.error).toMatch(/^the image unpacks to more than the \d+ bytes left of your plan's storage/);
    // Nothing of it unpacked is left.
    const dir = `${TEST_ROOT}/templates/${big.id}`;
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
    expect((await t.call('DELETE', `/templates/${big.id}`)).status).toBe(200);
    expect(existsSync(`${TEST_ROOT}/templates/${big.id}`)).toBe(false);

    const small = await t.call('POST', '/templates', { name: 'small', fromImage: `${reg.host}/test/bb:v1` });
    const ok = await waitBuilt(t, small.body.id);
    expect(ok.status).toBe('ready');
    expect(ok.sizeBytes).toBeGreaterThan(100_000);
    const after = (await t.call('GET', '/account/usage')).body.storageBytes;
    expect(after.used - before.used).toBe(ok.sizeBytes);

    // A file takes the rest of the storage: no template can be made or rebuilt, in words.
    const rest = after.limit - after.used;
    const f = await t.call('POST', '/files', { fileName: 'fill.bin', contentType: 'application/octet-stream', size: rest });
    expect(f.status, JSON.stringify(f.body)).toBe(201);
    const put = await fetch(f.body.putUrl, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: Buffer.alloc(rest) });
    expect(put.status).toBeLessThan(300);
    const refused = await t.call('POST', '/templates', { name: 'more', fromImage: `${reg.host}/test/bb:v1` });
    expect(refused.status).toBe(402);
    expect(refused.body.code).toBe('StorageQuotaExceeded');
    // A rebuild replaces its own bytes: what it had counts as free for it.
    const rb = await t.call('POST', `/templates/${small.body.id}/rebuild`, {});
    expect(rb.status, JSON.stringify(rb.body)).toBe(200);
    expect((await waitBuilt(t, small.body.id)).status).toBe('ready');
    expect((await t.call('DELETE', `/files/${f.body.file.id}`)).status).toBeLessThan(300);
    expect((await t.call('DELETE', `/templates/${small.body.id}`)).status).toBe(200);
  }, 300_000);
});
