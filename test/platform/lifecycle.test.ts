import { describe, expect, it } from 'vitest';
import { json, startNube } from '../helpers/server.js';

describe('operations', () => {
  it('GET /healthz answers without a credential', async () => {
    const t = await startNube();
    try {
      const r = await fetch(`${t.baseUrl}/healthz`);
      expect(r.status).toBe(200);
      expect(await json(r)).toMatchObject({ ok: true });
    } finally {
      await t.close();
    }
  });

  it('close() lets an in-flight request finish and refuses new work', async () => {
    const t = await startNube();
    const svc = t.nube.services.account;
    const original = svc.getAccount.bind(svc);
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => {
      entered = r;
    });
    svc.getAccount = async (p) => {
      entered();
      await new Promise((r) => setTimeout(r, 400));
      return original(p);
    };
    const inflight = fetch(`${t.baseUrl}/api/v2/account`, { headers: t.auth });
    // Close once the request is being handled (a fixed sleep raced a slow first request on a loaded host).
    await inHandler;
    const closing = t.close();
    const r = await inflight;
    expect(r.status).toBe(200);
    expect((await json(r)).plan.name).toBe('tera');
    await closing;
    await expect(fetch(`${t.baseUrl}/api/v2/account`, { headers: t.auth })).rejects.toThrow();
  });

  it('close() cuts a response still open after NUBE_SHUTDOWN_GRACE_MS instead of waiting for it', async () => {
    const t = await startNube({ env: { NUBE_SHUTDOWN_GRACE_MS: '300' } });
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => {
      entered = r;
    });
    // A handler that never answers stands for a stream whose client went quiet.
    t.nube.services.account.getAccount = () => {
      entered();
      return new Promise(() => {});
    };
    // Settled as a value at once: the connection is cut during close(), before anything awaits it.
    const stuck = fetch(`${t.baseUrl}/api/v2/account`, { headers: t.auth }).then(
      (r) => `answered ${r.status}`,
      (e: Error) => e,
    );
    await inHandler;
    const started = Date.now();
    await t.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(await stuck).toBeInstanceOf(Error);
  });

  it('a restart on the same data dir keeps the owner and its key', async () => {
    const first = await startNube();
    const { dataDir, ownerKey } = first;
    await first.nube.close();
    const second = await startNube({ dataDir, env: { NUBE_OWNER_KEY: ownerKey } });
    try {
      expect(second.nube.ownerKeyToPrint).toBeUndefined();
      const r = await fetch(`${second.baseUrl}/api/v2/account`, { headers: second.auth });
      expect(r.status).toBe(200);
    } finally {
      await second.close();
    }
  });
});
