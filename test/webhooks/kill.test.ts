// Issue 9, item 1: the event of an acknowledged change must survive nube dying right after the
// acknowledgement. nube runs as a child process; uploads run in parallel lanes and the child gets
// SIGKILL the moment the Kth PUT's 200 arrives (before its body is even read). After the last round a
// fresh nube on the same data must deliver file.created for every upload that was acknowledged.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { exited, freePort, spawnNube } from '../helpers/process.js';
import { newOwnerKey } from '../helpers/server.js';
import { FAST } from './helpers.js';
import { startReceiver } from './receiver.js';

const ROUNDS = 12;
const LANES = 8;

describe.each(DIALECTS)('events of acknowledged changes survive kill -9 (%s)', (dialect) => {
  const cleanup: (() => unknown)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  it(`delivers file.created for every upload acknowledged before ${ROUNDS} kills at the acknowledgement`, { timeout: 900_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'nube-kill-'));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const pg = dialect === 'postgres' ? await createTempDatabase('whkill') : undefined;
    if (pg) cleanup.push(pg.drop);
    const rx = await startReceiver();
    cleanup.push(() => rx.close());
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const ownerKey = newOwnerKey();
    const env: Record<string, string> = {
      ...FAST,
      NUBE_DATA_DIR: dataDir,
      NUBE_PORT: String(port),
      NUBE_HOST: '127.0.0.1',
      NUBE_OWNER_KEY: ownerKey,
      NUBE_LOG_LEVEL: 'silent',
      NUBE_JOB_POLL_MS: '50',
      ...(pg ? { DATABASE_URL: pg.url } : {}),
    };
    const auth = { authorization: `Bearer ${ownerKey}`, 'content-type': 'application/json' };
    let child = await spawnNube(env, base);
    cleanup.push(() => {
      child.kill('SIGKILL');
    });
    const hook = await fetch(`${base}/api/v2/webhooks`, { method: 'POST', headers: auth, body: JSON.stringify({ url: rx.url, events: ['file.created'] }) });
    expect(hook.status).toBe(201);

    const acked = new Set<string>();
    for (let round = 0; round < ROUNDS; round++) {
      if (round > 0) child = await spawnNube(env, base);
      const killAt = 4 + ((round * 7) % 13);
      let acks = 0;
      let killed = false;
      const lane = async (n: number) => {
        for (let i = 0; !killed; i++) {
          try {
            const body = Buffer.from(`round ${round} lane ${n} upload ${i}`);
            const created = await fetch(`${base}/api/v2/files`, {
              method: 'POST',
              headers: auth,
              body: JSON.stringify({ fileName: `r${round}-${n}-${i}.txt`, contentType: 'text/plain', size: body.byteLength }),
            });
            if (created.status !== 201) return;
            const { file, putUrl } = (await created.json()) as { file: { id: string }; putUrl: string };
            const put = await fetch(putUrl, { method: 'PUT', body, headers: { 'content-type': 'text/plain' } });
            if (put.status !== 200) return;
            // Acknowledged: from here on the upload exists for its client, and so must its event.
            acked.add(file.id);
            if (++acks >= killAt && !killed) {
              killed = true;
              child.kill('SIGKILL');
            }
            await put.arrayBuffer();
          } catch {
            return; // the server is gone
          }
        }
      };
      await Promise.all(Array.from({ length: LANES }, (_, n) => lane(n)));
      await exited(child);
    }
    expect(acked.size).toBeGreaterThanOrEqual(100);

    child = await spawnNube(env, base);
    const delivered = () =>
      new Set(
        rx.got
          .map((g) => JSON.parse(g.raw) as { event: string; data: { id: string } })
          .filter((b) => b.event === 'file.created')
          .map((b) => b.data.id),
      );
    const end = Date.now() + 120_000;
    while ([...acked].some((id) => !delivered().has(id)) && Date.now() < end) await sleep(200);
    const got = delivered();
    expect([...acked].filter((id) => !got.has(id))).toEqual([]);
    child.kill('SIGTERM');
    await exited(child);
  });
});
