import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JobsKit, postgresAvailable, sleep, uniqueType, waitFor } from './jobs-test-kit.js';

const pgUp = await postgresAvailable();

// A worker in its own process: leases the job, reports it, then hangs in the handler until killed.
const CHILD = `
const { openStore } = await import(${JSON.stringify(new URL('../store/db.ts', import.meta.url).href)});
const { createJobQueue } = await import(${JSON.stringify(new URL('./jobs.ts', import.meta.url).href)});
const { location, type, leaseMs } = JSON.parse(process.env.NUBE_JOBS_CHILD);
const queue = createJobQueue({ store: openStore(location), pollIntervalMs: 20 });
queue.register(type, async (_p, job) => {
  process.stdout.write('leased ' + job.id + ' ' + queue.workerId + '\\n');
  await new Promise(() => {});
}, { leaseMs: leaseMs ?? 600 });
queue.start();
`;

describe.each(['sqlite', 'postgres'] as const)('job queue durability on %s', (dialect) => {
  describe.skipIf(dialect === 'postgres' && !pgUp)('leases', () => {
    const kit = new JobsKit(dialect);
    beforeAll(() => kit.setup());
    afterEach(() => kit.stopQueues());
    afterAll(() => kit.teardown());

    it('a job whose worker died runs on another worker once the lease expires', async () => {
      const type = uniqueType('orphan');
      const queue = kit.queue();
      const attempts: number[] = [];
      queue.register(type, async (_p, job) => {
        attempts.push(job.attempts);
      });
      const id = await queue.enqueue(type, null);
      // Leave the row exactly as a worker that leased it and then vanished would.
      const until = Date.now() + 600;
      await kit
        .store()
        .db.updateTable('jobs')
        .set({ status: 'running', attempts: 1, leased_by: 'wrk_gone', lease_until: until })
        .where('id', '=', id)
        .execute();
      expect(await queue.runDue()).toBe(0);
      await waitFor(async () => (await queue.runDue()) === 1);
      expect(Date.now()).toBeGreaterThanOrEqual(until);
      expect(attempts).toEqual([2]);
      expect(await queue.get(id)).toMatchObject({ status: 'done', leasedBy: queue.workerId });
    });

    it('a worker on this host killed with SIGKILL mid-job: a new queue takes its lease back at once', async () => {
      const type = uniqueType('killed');
      const bootstrap = kit.queue();
      const id = await bootstrap.enqueue(type, { important: true });
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD], {
        env: { ...process.env, NUBE_JOBS_CHILD: JSON.stringify({ location: kit.location, type, leaseMs: 120_000 }) },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const exited = new Promise((r) => child.once('exit', r));
      let childWorker = '';
      try {
        const line = await new Promise<string>((resolve, reject) => {
          createInterface({ input: child.stdout! }).once('line', resolve);
          child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
        });
        const [, leasedId, worker] = line.split(' ');
        childWorker = worker!;
        expect(leasedId).toBe(id);
        // The worker's id names its process on this host (boot, pid namespace, pid, start time).
        expect(childWorker).toMatch(new RegExp(`#[0-9a-f]{32}\\.\\d+\\.${child.pid}\\.\\d+$`));
        const held = await bootstrap.get(id);
        expect(held).toMatchObject({ status: 'running', attempts: 1, leasedBy: childWorker });
        // A live worker's lease is not taken: this queue's poll leaves the job alone.
        expect(await bootstrap.runDue()).toBe(0);
        expect(await bootstrap.get(id)).toMatchObject({ status: 'running', leasedBy: childWorker });
      } finally {
        child.kill('SIGKILL');
        await exited;
      }
      const leaseUntil = (await bootstrap.get(id))!.leaseUntil!.getTime();
      expect(leaseUntil - Date.now()).toBeGreaterThan(60_000);

      // A queue started after the kill (nube restarted) runs the job at once, not in two minutes.
      const restarted = kit.queue({ store: kit.store() });
      const ran: unknown[] = [];
      restarted.register(type, async (payload, job) => {
        ran.push({ payload, attempt: job.attempts, at: Date.now() });
      });
      expect(await restarted.runDue()).toBe(1);
      expect(ran).toEqual([{ payload: { important: true }, attempt: 2, at: expect.any(Number) }]);
      expect((ran[0] as { at: number }).at).toBeLessThan(leaseUntil - 60_000);
      expect(await restarted.get(id)).toMatchObject({ status: 'done', leasedBy: restarted.workerId });
    });

    it('a handler that fails once the queue is stopping is handed back, not failed', async () => {
      const type = uniqueType('cut');
      const queue = kit.queue();
      let sawStopping = false;
      let entered = false;
      queue.register(
        type,
        async (_p, job) => {
          if (!entered) {
            entered = true;
            // What nube's stop does to a build: the exec it waits on ends with an error mid-grace.
            await new Promise((r) => job.stopping.addEventListener('abort', r));
            sawStopping = job.stopping.aborted && !job.signal.aborted;
          }
          throw new Error('nube-helper serve ended the exec without a status (nothing)');
        },
        { leaseMs: 60_000, maxAttempts: 1 },
      );
      const id = await queue.enqueue(type, null);
      queue.start();
      await waitFor(() => entered);
      await queue.stop({ graceMs: 5000 });
      expect(sawStopping).toBe(true);
      // One attempt allowed and it was cut: still queued, the attempt not counted, no error recorded.
      expect(await queue.get(id)).toMatchObject({ status: 'queued', attempts: 0, leasedBy: null, lastError: null });
      // Started again, the queue is no longer stopping: a failure is the job's own again.
      queue.start();
      await waitFor(async () => (await queue.get(id))?.status === 'dead');
      expect((await queue.get(id))?.lastError).toContain('ended the exec without a status');
    });

    it('graceful stop lets short handlers finish and releases the rest at once', async () => {
      const type = uniqueType('graceful');
      const queue = kit.queue();
      const started = new Set<string>();
      let abortedWith: unknown;
      queue.register(
        type,
        async (p: { ms: number }, job) => {
          started.add(job.id);
          await new Promise<void>((resolve, reject) => {
            const t = setTimeout(resolve, p.ms);
            job.signal.addEventListener('abort', () => {
              clearTimeout(t);
              abortedWith = job.signal.reason;
              reject(job.signal.reason);
            });
          });
        },
        { leaseMs: 60_000 },
      );
      const quick = await queue.enqueue(type, { ms: 100 });
      const slow = await queue.enqueue(type, { ms: 60_000 });
      queue.start();
      await waitFor(() => started.size === 2);
      const t0 = Date.now();
      await queue.stop({ graceMs: 400 });
      // Aborted after the grace, not after the slow job's 60 s; generous for a busy machine.
      expect(Date.now() - t0).toBeLessThan(30_000);
      expect(String(abortedWith)).toContain('stopping');
      expect(await queue.get(quick)).toMatchObject({ status: 'done' });
      // Released, not failed: queued, due, the interrupted attempt not counted, no lease to wait out.
      const released = await queue.get(slow);
      expect(released).toMatchObject({ status: 'queued', attempts: 0, leasedBy: null, leaseUntil: null });
      expect(released?.lastError).toBeNull();

      const next = kit.queue({ store: kit.store() });
      const seen: number[] = [];
      next.register(type, async (_p, job) => {
        seen.push(job.attempts);
      });
      expect(await next.runDue()).toBe(1);
      expect(seen).toEqual([1]);
    });

    it('two queues with separate connections racing over 200 jobs run each exactly once', async () => {
      const type = uniqueType('race');
      const a = kit.queue({ store: kit.store(), concurrency: 10, pollIntervalMs: 5 });
      const b = kit.queue({ store: kit.store(), concurrency: 10, pollIntervalMs: 5 });
      const runs = new Map<string, number>();
      const byWorker = { a: 0, b: 0 };
      for (const [name, q] of [
        ['a', a],
        ['b', b],
      ] as const) {
        q.register(type, async (_p, job) => {
          runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
          byWorker[name]++;
          await sleep(Math.random() * 5);
        });
      }
      const ids = new Set(await Promise.all(Array.from({ length: 200 }, (_, i) => a.enqueue(type, { i }))));
      expect(ids.size).toBe(200);
      a.start();
      b.start();
      await waitFor(() => runs.size === 200, 20_000);
      await Promise.all([a.stop(), b.stop()]);
      expect([...runs.keys()].every((id) => ids.has(id))).toBe(true);
      expect([...runs.values()].filter((n) => n !== 1)).toEqual([]);
      expect(byWorker.a + byWorker.b).toBe(200);
      expect(byWorker.a).toBeGreaterThan(0);
      expect(byWorker.b).toBeGreaterThan(0);
      const done = await Promise.all([...ids].map((id) => a.get(id)));
      expect(done.every((j) => j?.status === 'done')).toBe(true);
    });
  });
});
