// Issue 33 item 1, backups: a volume backed up to the blob store (a job: snapshot, zstd tar, SHA-256)
// while a sandbox writes to it restores into a new volume with the same files, owners and modes; a
// blob whose bytes changed fails the restore; bad input is 400, another account's volume or backup
// 404; a plan's number of volumes and their total GiB answer 402 naming the limit. On SQLite and
// PostgreSQL, the local blob store.
import { chownSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import {
  type SandboxNube,
  TEMPLATE_WAIT_MS,
  startSandboxNube,
  stopSandboxNube,
  until,
} from '../sandboxes/helpers.js';

// What a restore must bring back: every path with its mode, owner, type, and the data's checksums.
const LISTING =
  "cd /data && find . -path ./lost+found -prune -o -printf '%p %m %U:%G %y %l\\n' | sort && sha256sum blob dir/greeting";

describe.each(DIALECTS)('%s: volume backups', (dialect) => {
  let t: SandboxNube;
  let other: Record<string, string>;

  beforeAll(async () => {
    t = await startSandboxNube(
      `volbak-${dialect}`,
      { NUBE_SANDBOX_DRIVER: 'namespaces', NUBE_SANDBOX_CREATE_PER_MINUTE: '1000' },
      undefined,
      { dialect },
    );
    const acct = await t.nube.services.account.createAccount({ name: 'neighbour', plan: 'byte' });
    other = { authorization: `Bearer ${acct.secret}` };
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (!t) return;
    for (const s of (await t.call('GET', '/sandboxes')).body?.sandboxes ?? [])
      await t.call('DELETE', `/sandboxes/${s.id}`);
    for (const auth of [{}, other]) {
      for (const v of (await t.call('GET', '/volumes', undefined, auth)).body?.items ?? []) {
        for (const b of (await t.call('GET', `/volumes/${v.id}/backups`, undefined, auth)).body?.items ?? [])
          await t.call('DELETE', `/volume-backups/${b.id}`, undefined, auth);
        await t.call('DELETE', `/volumes/${v.id}`, undefined, auth);
      }
    }
    await stopSandboxNube(t);
  }, 120_000);

  const exec = async (id: string, command: string) => {
    const r = await t.call('POST', `/sandboxes/${id}/exec`, { command, timeoutSeconds: 120 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.exitCode, r.body.stderr).toBe(0);
    return r.body.stdout as string;
  };
  const backupDone = async (id: string) => {
    const b = await until(
      () => t.call('GET', `/volume-backups/${id}`),
      (r) => r.body?.status !== 'running',
      120_000,
    );
    expect(b.body.status, JSON.stringify(b.body)).toBe('completed');
    return b.body;
  };
  const restored = (id: string) =>
    until(
      () => t.call('GET', `/volumes/${id}`),
      (r) => r.body?.status !== 'restoring',
      120_000,
    );

  it('a backup taken while a sandbox writes restores into a new volume: same files, owners, modes', async () => {
    const v = await t.call('POST', '/volumes', { name: 'src', sizeGB: 1 });
    expect(v.status).toBe(201);
    expect(v.body).toMatchObject({ status: 'ready', error: null, lastBackupId: null });
    const s = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: v.body.id, path: '/data' }] });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    await exec(
      s.body.id,
      'mkdir -p /data/dir/sub && echo hello > /data/dir/greeting && chmod 640 /data/dir/greeting && ' +
        'chown 1000:1001 /data/dir/sub && ln -s dir/greeting /data/link && ' +
        'head -c 20000000 /dev/urandom > /data/blob && sync',
    );
    const before = await exec(s.body.id, LISTING);
    // A writer keeps appending while the backup is taken: the backup is of one instant (its snapshot).
    const bg = await t.call('POST', `/sandboxes/${s.body.id}/bg`, {
      command: "timeout 30 sh -c 'while :; do date >> /data/log; done'",
    });
    expect(bg.status, JSON.stringify(bg.body)).toBeLessThan(300);
    await exec(
      s.body.id,
      'for i in $(seq 50); do test -s /data/log && break; sleep 0.1; done; test -s /data/log',
    );
    const started = performance.now();
    const b = await t.call('POST', `/volumes/${v.body.id}/backups`);
    expect(b.status, JSON.stringify(b.body)).toBe(201);
    expect(b.body).toMatchObject({ volumeId: v.body.id, volumeName: 'src', status: 'running', sha256: null });
    const done = await backupDone(b.body.id);
    const backupMs = performance.now() - started;
    expect(done.sha256).toMatch(/^[0-9a-f]{64}$/);
    // Random bytes do not compress: the stored size is about what the volume held.
    expect(done.sizeBytes).toBeGreaterThan(19_000_000);
    expect(done.usedBytes).toBeGreaterThanOrEqual(20_000_000);
    expect(done.volumeSizeBytes).toBe(1024 ** 3);
    await exec(s.body.id, 'echo later > /data/later; sync');
    const list = await t.call('GET', `/volumes/${v.body.id}/backups`);
    expect(list.body.items.map((x: { id: string }) => x.id)).toEqual([b.body.id]);
    expect((await t.call('GET', `/volumes/${v.body.id}`)).body.lastBackupId).toBe(b.body.id);

    const r = await t.call('POST', '/volumes', { name: 'back', fromBackupId: b.body.id });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body).toMatchObject({ name: 'back', sizeGB: 1, sourceId: b.body.id });
    expect(['restoring', 'ready']).toContain(r.body.status);
    const ready = await restored(r.body.id);
    expect(ready.body.status, JSON.stringify(ready.body)).toBe('ready');
    expect(ready.body.usedBytes).toBeGreaterThanOrEqual(20_000_000);
    const k = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: r.body.id, path: '/data' }] });
    expect(k.status, JSON.stringify(k.body)).toBe(200);
    // The log the writer appended to is in it (whatever it held at the snapshot), the later file is not.
    const after = await exec(k.body.id, LISTING);
    expect(after.split('\n').filter((l) => !l.startsWith('./log '))).toEqual(
      before.split('\n').filter((l) => !l.startsWith('./log ')),
    );
    expect(await exec(k.body.id, 'test -e /data/later && echo there || echo absent')).toBe('absent\n');
    expect(await exec(k.body.id, 'tail -n 1 /data/log | wc -l')).toBe('1\n');
    // The restored volume is writable by the sandbox's root, as the original.
    await exec(k.body.id, 'echo mine >> /data/dir/greeting');
    console.log(
      `[volume backups] 20 MB volume: backup completed in ${backupMs.toFixed(0)} ms through the API`,
    );
    for (const x of [s, k]) expect((await t.call('DELETE', `/sandboxes/${x.body.id}`)).status).toBe(200);
  }, 300_000);

  it("bad input is 400, another account's backup 404, a blob whose bytes changed fails the restore", async () => {
    const a = await t.call('POST', '/volumes', { name: 'a', sizeGB: 1 });
    const c = await t.call('POST', '/volumes', { name: 'c', sizeGB: 1 });
    const s = await t.call('POST', '/sandboxes', {
      volumes: [
        { volumeId: a.body.id, path: '/a' },
        { volumeId: c.body.id, path: '/c' },
      ],
    });
    await exec(s.body.id, 'echo aaa > /a/f && echo ccc > /c/f && sync');
    const ba = await t.call('POST', `/volumes/${a.body.id}/backups`);
    const bc = await t.call('POST', `/volumes/${c.body.id}/backups`);
    await backupDone(ba.body.id);
    await backupDone(bc.body.id);

    for (const body of [
      { name: 'x', fromBackupId: ba.body.id, fromVolumeId: a.body.id },
      { name: 'x', fromBackupId: ba.body.id, fromSnapshotId: 'vsn_x' },
      { name: 'x', fromBackupId: '' },
      { name: 'x', fromBackupId: ba.body.id, sizeGB: 0 },
      { fromBackupId: ba.body.id },
    ]) {
      const r = await t.call('POST', '/volumes', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.issues.length).toBeGreaterThan(0);
    }
    expect((await t.call('POST', '/volumes', { name: 'x', fromBackupId: 'vbk_nope' })).status).toBe(404);
    expect((await t.call('GET', '/volume-backups/vbk_nope')).status).toBe(404);
    // Another account sees none of it.
    expect((await t.call('POST', '/volumes', { name: 'x', fromBackupId: ba.body.id }, other)).status).toBe(
      404,
    );
    expect((await t.call('GET', `/volume-backups/${ba.body.id}`, undefined, other)).status).toBe(404);
    expect((await t.call('DELETE', `/volume-backups/${ba.body.id}`, undefined, other)).status).toBe(404);
    expect((await t.call('POST', `/volumes/${a.body.id}/backups`, undefined, other)).status).toBe(404);
    expect((await t.call('GET', `/volumes/${a.body.id}/backups`, undefined, other)).status).toBe(404);
    expect((await t.call('GET', '/volumes/vol_nope/backups')).status).toBe(404);

    // a's blob now holds c's bytes (a whole, valid archive): the restore reads it all and refuses it.
    const keys = await t.nube.deps.store.db
      .selectFrom('volume_backups')
      .select(['id', 'blob_key'])
      .where('id', 'in', [ba.body.id, bc.body.id])
      .execute();
    const key = (id: string) => keys.find((x) => x.id === id)!.blob_key;
    const blobs = t.nube.services.files.stores.at();
    await blobs.put(key(ba.body.id), (await blobs.get(key(bc.body.id))).stream);
    const bad = await t.call('POST', '/volumes', { name: 'bad', fromBackupId: ba.body.id });
    expect(bad.status).toBe(201);
    const failed = await restored(bad.body.id);
    expect(failed.body.status).toBe('failed');
    expect(failed.body.error).toMatch(/SHA-256 does not match/);
    const mount = await t.call('POST', '/sandboxes', { volumes: [{ volumeId: bad.body.id, path: '/data' }] });
    expect(mount.status).toBe(409);
    expect(mount.body.code).toBe('VolumeNotReady');
    expect((await t.call('POST', `/volumes/${bad.body.id}/backups`)).body.code).toBe('VolumeNotReady');
    expect((await t.call('DELETE', `/volumes/${bad.body.id}`)).status).toBe(200);
    // c's own backup still restores; deleting a backup removes it from the list.
    const good = await t.call('POST', '/volumes', { name: 'good', fromBackupId: bc.body.id });
    expect((await restored(good.body.id)).body.status).toBe('ready');
    // A restore's limit may not be below what the volume held (as a copy's): 400 on sizeGB.
    await t.nube.deps.store.db
      .updateTable('volume_backups')
      .set({ used_bytes: 2 * 1024 ** 3 })
      .where('id', '=', bc.body.id)
      .execute();
    const small = await t.call('POST', '/volumes', { name: 'small', fromBackupId: bc.body.id, sizeGB: 1 });
    expect(small.status).toBe(400);
    expect(small.body.code).toBe('VolumeTooSmall');
    expect(small.body.issues[0].path).toContain('sizeGB');
    expect((await t.call('DELETE', `/volume-backups/${ba.body.id}`)).status).toBe(200);
    expect((await t.call('GET', `/volume-backups/${ba.body.id}`)).status).toBe(404);
    expect((await t.call('GET', `/volumes/${a.body.id}/backups`)).body.items).toEqual([]);
    expect((await t.call('DELETE', `/sandboxes/${s.body.id}`)).status).toBe(200);
    // A backup outlives its volume: listed and restorable after the volume is deleted.
    expect((await t.call('DELETE', `/volumes/${c.body.id}`)).status).toBe(200);
    const kept = await t.call('GET', `/volumes/${c.body.id}/backups`);
    expect(kept.body.items.map((x: { id: string }) => x.id)).toEqual([bc.body.id]);
  }, 300_000);

  it('a Byte account holds 2 volumes and 5 GiB of them: 402 names the limit', async () => {
    const one = await t.call('POST', '/volumes', { name: 'one', sizeGB: 1 }, other);
    expect(one.status, JSON.stringify(one.body)).toBe(201);
    const big = await t.call('POST', '/volumes', { name: 'big', sizeGB: 5 }, other);
    expect(big.status).toBe(402);
    expect(big.body).toMatchObject({ code: 'VolumeSpaceExceeded', limitGB: 5, usedGB: 1, requestedGB: 5 });
    expect(big.body.error).toMatch(/Byte plan allows 5 GiB of volumes/);
    const four = await t.call('POST', '/volumes', { name: 'four', sizeGB: 4 }, other);
    expect(four.status).toBe(201);
    const usage = await t.call('GET', '/account/usage', undefined, other);
    expect(usage.body).toMatchObject({
      volumes: { used: 2, limit: 2, remaining: 0 },
      volumeGB: { used: 5, limit: 5, remaining: 0 },
    });
    const third = await t.call('POST', '/volumes', { name: 'third', sizeGB: 1 }, other);
    expect(third.status).toBe(402);
    expect(third.body).toMatchObject({ code: 'VolumeLimitReached', limit: 2, current: 2 });
    expect(third.body.error).toMatch(/Byte plan allows 2 volumes/);
    // A copy counts as a volume too; growing one past the total is refused, shrinking is not.
    expect(
      (await t.call('POST', '/volumes', { name: 'copy', fromVolumeId: one.body.id }, other)).status,
    ).toBe(402);
    const grow = await t.call('PATCH', `/volumes/${one.body.id}`, { sizeGB: 2 }, other);
    expect(grow.status).toBe(402);
    expect(grow.body.code).toBe('VolumeSpaceExceeded');
    expect((await t.call('PATCH', `/volumes/${four.body.id}`, { sizeGB: 3 }, other)).status).toBe(200);
    expect((await t.call('PATCH', `/volumes/${one.body.id}`, { sizeGB: 2 }, other)).status).toBe(200);
    for (const v of [one, four])
      expect((await t.call('DELETE', `/volumes/${v.body.id}`, undefined, other)).status).toBe(200);
  }, 120_000);

  it("a store whose uid base differs from the one that took the archive shifts the owners onto its own", async () => {
    const store = t.nube.services.sandboxes.core.runtime.volumes!;
    const v = await t.call('POST', '/volumes', { name: 'owners', sizeGB: 1 });
    const dir = await store.path(v.body.id);
    writeFileSync(join(dir, 'f'), 'x');
    chownSync(join(dir, 'f'), store.uidBase + 1000, store.uidBase + 1001);
    const snap = `vsn_shift${dialect}`;
    const copy = `vol_shift${dialect}`;
    await store.snapshot(v.body.id, snap);
    try {
      const { stream, done } = await store.archive(snap);
      // As if taken on a store whose sandboxes' root was 7 ids higher.
      const [restored, archived] = await Promise.allSettled([
        store.restore(copy, 1024 ** 3, stream, store.uidBase + 7),
        done,
      ]);
      expect(archived).toEqual({ status: 'fulfilled', value: undefined });
      expect(restored).toEqual({ status: 'fulfilled', value: undefined });
      const st = statSync(join(await store.path(copy), 'f'));
      expect([st.uid, st.gid]).toEqual([store.uidBase + 993, store.uidBase + 994]);
      expect(statSync(await store.path(copy)).uid).toBe(store.uidBase - 7);
    } finally {
      await store.removeSnapshot(snap);
      await store.remove(copy);
    }
    expect((await t.call('DELETE', `/volumes/${v.body.id}`)).status).toBe(200);
  });

  it('the backup operations are MCP tools and in the OpenAPI document', async () => {
    const tools = (await (await fetch(`${t.baseUrl}/api/tools.json`)).json()) as {
      tools: { name: string }[];
    };
    const names = tools.tools.map((x) => x.name);
    for (const n of ['volumes_backup', 'volumes_backups', 'volumes_getBackup', 'volumes_deleteBackup'])
      expect(names).toContain(n);
  });
});
