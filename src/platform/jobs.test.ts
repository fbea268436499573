import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PermanentJobError } from './jobs.js';
import { JobsKit, postgresAvailable, sleep, uniqueType, waitFor } from './jobs-test-kit.js';

const pgUp = await postgresAvailable();

describe.each(['sqlite', 'postgres'] as const)('job queue on %s', (dialect) => {
  describe.skipIf(dialect === 'postgres' && !pgUp)('semantics', () => {
    const kit = new JobsKit(dialect);
    beforeAll(() => kit.setup());
    afterEach(() => kit.stopQueues());
    afterAll(() => kit.teardown());

    it('runs an enqueued job with its payload, woken at once by an in-process enqueue', async () => {
      const type = uniqueType('hello');
      // A long poll interval: the job can only run before it if enqueue wakes the poller.
      const queue = kit.queue({ pollIntervalMs: 600_000 });
      const seen: unknown[] = [];
      queue.register<{ n: number }>(type, async (payload, job) => {
        seen.push(payload, job.attempts, job.type);
      });
      queue.start();
      await sleep(50); // let the first (empty) poll pass, so the loop is asleep
      const t0 = Date.now();
      const id = await queue.enqueue(type, { n: 7 });
      expect(id).toMatch(/^job_/);
      await waitFor(async () => (await queue.get(id))?.status === 'done', 60_000);
      // Generous for a busy machine; the next poll would come 600 s later.
      expect(Date.now() - t0).toBeLessThan(60_000);
      expect(seen).toEqual([{ n: 7 }, 1, type]);
      const info = await queue.get(id);
      // leased_by stays on a done job as the record of which worker ran it.
      expect(info).toMatchObject({ status: 'done', attempts: 1, leasedBy: queue.workerId, leaseUntil: null });
    }, 120_000);

    it('runs a job with runAt in the future only once it is due', async () => {
      const type = uniqueType('later');
      const queue = kit.queue();
      const ranAt: number[] = [];
      queue.register(type, async () => {
        ranAt.push(Date.now());
      });
      // Due in 3 s: the checks before it must not depend on how fast this machine is.
      const runAt = Date.now() + 3000;
      const id = await queue.enqueue(type, null, { runAt: new Date(runAt) });
      expect((await queue.get(id))?.runAt.getTime()).toBe(runAt);
      expect(await queue.runDue()).toBe(0);
      await sleep(200);
      expect(await queue.runDue()).toBe(0);
      await waitFor(async () => (await queue.runDue()) === 1, 20_000);
      expect(ranAt).toHaveLength(1);
      expect(ranAt[0]).toBeGreaterThanOrEqual(runAt);
    });

    it('retries a failing job with backoff, then succeeds', async () => {
      const type = uniqueType('flaky');
      const queue = kit.queue();
      const times: number[] = [];
      const asked: number[] = [];
      queue.register(
        type,
        async (_p, job) => {
          times.push(Date.now());
          if (job.attempts < 3) throw new Error(`boom ${job.attempts}`);
        },
        {
          backoff: (attempt) => {
            asked.push(attempt);
            return attempt * 150;
          },
        },
      );
      queue.start();
      const id = await queue.enqueue(type, {});
      await waitFor(async () => (await queue.get(id))?.status === 'done');
      expect(asked).toEqual([1, 2]);
      expect(times).toHaveLength(3);
      expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(150);
      expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(300);
      const info = await queue.get(id);
      expect(info?.attempts).toBe(3);
      expect(info?.lastError).toContain('boom 2');
    });

    it('marks a job dead with its last error after maxAttempts, and PermanentJobError at once', async () => {
      const type = uniqueType('doomed');
      const queue = kit.queue();
      let runs = 0;
      queue.register(
        type,
        async (payload: { permanent: boolean }) => {
          runs++;
          if (payload.permanent) throw new PermanentJobError('bad input');
          throw new Error(`failure ${runs}`);
        },
        { maxAttempts: 3, backoff: () => 0 },
      );
      const id = await queue.enqueue(type, { permanent: false });
      for (let i = 0; i < 3; i++) expect(await queue.runDue()).toBe(1);
      expect(await queue.runDue()).toBe(0);
      expect(await queue.get(id)).toMatchObject({ status: 'dead', attempts: 3, maxAttempts: 3 });
      expect((await queue.get(id))?.lastError).toContain('failure 3');

      runs = 0;
      const perm = await queue.enqueue(type, { permanent: true });
      expect(await queue.runDue()).toBe(1);
      expect(await queue.runDue()).toBe(0);
      expect(await queue.get(perm)).toMatchObject({ status: 'dead', attempts: 1 });
      expect((await queue.get(perm))?.lastError).toContain('bad input');
    });

    it('dedupes by key: keep returns the pending job, replace re-arms it, a finished job frees the key', async () => {
      const type = uniqueType('keyed');
      const queue = kit.queue();
      const ran: unknown[] = [];
      queue.register(type, async (p) => {
        ran.push(p);
      });
      const later = Date.now() + 60_000;
      const ids = await Promise.all(
        Array.from({ length: 10 }, (_, i) => queue.enqueue(type, { v: i }, { key: 'k1', runAt: later })),
      );
      expect(new Set(ids).size).toBe(1);
      const first = (await queue.get(ids[0]!))!.payload;
      expect(await queue.enqueue(type, { v: 'kept?' }, { key: 'k1' })).toBe(ids[0]);
      expect((await queue.get(ids[0]!))?.payload).toEqual(first);
      expect(await queue.runDue()).toBe(0);

      const replaced = await queue.enqueue(type, { v: 'new' }, { key: 'k1', onDuplicate: 'replace' });
      expect(replaced).toBe(ids[0]);
      expect(await queue.get(replaced)).toMatchObject({ payload: { v: 'new' }, status: 'queued' });
      expect(await queue.runDue()).toBe(1);
      expect(ran).toEqual([{ v: 'new' }]);

      const again = await queue.enqueue(type, { v: 'second' }, { key: 'k1' });
      expect(again).not.toBe(replaced);
      expect(await queue.runDue()).toBe(1);
      expect(ran).toEqual([{ v: 'new' }, { v: 'second' }]);
    });

    it('replace while the keyed job is running enqueues a fresh job and the running one finishes', async () => {
      const type = uniqueType('rearm');
      const queue = kit.queue();
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      const ran: unknown[] = [];
      queue.register(type, async (p: { v: number }) => {
        ran.push(p.v);
        if (p.v === 1) await gate;
      });
      const a = await queue.enqueue(type, { v: 1 }, { key: 'ttl' });
      const running = queue.runDue();
      await waitFor(() => ran.length === 1);
      const b = await queue.enqueue(type, { v: 2 }, { key: 'ttl', onDuplicate: 'replace' });
      expect(b).not.toBe(a);
      release();
      await running;
      expect(await queue.get(a)).toMatchObject({ status: 'done', key: null });
      expect(await queue.runDue()).toBe(1);
      expect(ran).toEqual([1, 2]);
      expect(await queue.get(b)).toMatchObject({ status: 'done', key: 'ttl' });
    });

    it('cancels queued jobs by id and by key; a cancelled running job gets no retry', async () => {
      const type = uniqueType('cancel');
      const queue = kit.queue();
      const ran: string[] = [];
      let running = false;
      let cancelled!: () => void;
      const afterCancel = new Promise<void>((r) => {
        cancelled = r;
      });
      queue.register(
        type,
        async (p: string) => {
          ran.push(p);
          if (p === 'running') {
            running = true;
            // Fails only once the test has cancelled it, however slow the machine.
            await afterCancel;
            throw new Error('fails after cancel');
          }
        },
        { backoff: () => 0 },
      );
      const byId = await queue.enqueue(type, 'by-id');
      await queue.enqueue(type, 'by-key', { key: 'timer-1' });
      expect(await queue.cancel({ id: byId })).toBe(1);
      expect(await queue.cancel({ key: 'timer-1' })).toBe(1);
      expect(await queue.cancel({ key: 'timer-1' })).toBe(0);
      expect(await queue.get(byId)).toBeUndefined();
      expect(await queue.runDue()).toBe(0);
      expect(ran).toEqual([]);

      const r = await queue.enqueue(type, 'running');
      const cycle = queue.runDue();
      await waitFor(() => running);
      expect(await queue.cancel({ id: r })).toBe(1);
      cancelled();
      await cycle;
      expect(await queue.get(r)).toMatchObject({ status: 'dead', attempts: 1 });
      expect(await queue.runDue()).toBe(0);
    });

    it('respects per-type concurrency', async () => {
      const type = uniqueType('narrow');
      const queue = kit.queue();
      let now = 0;
      let peak = 0;
      queue.register(
        type,
        async () => {
          peak = Math.max(peak, ++now);
          await sleep(40);
          now--;
        },
        { concurrency: 2 },
      );
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) ids.push(await queue.enqueue(type, i));
      queue.start();
      await waitFor(async () =>
        (await Promise.all(ids.map((id) => queue.get(id)))).every((j) => j?.status === 'done'),
      );
      expect(peak).toBe(2);
    });

    it('prunes done jobs after their retention', async () => {
      const type = uniqueType('prune');
      const queue = kit.queue({ retainDoneMs: 50, retainDeadMs: 60_000, pruneIntervalMs: 0 });
      queue.register(type, async () => {});
      const id = await queue.enqueue(type, null);
      expect(await queue.runDue()).toBe(1);
      expect((await queue.get(id))?.status).toBe('done');
      await sleep(80);
      queue.start();
      await waitFor(async () => (await queue.get(id)) === undefined);
    });
  });
});
