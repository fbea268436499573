// The job queue as Prometheus sees it, read from the jobs table at scrape time. The table is shared by
// every replica, so every replica reports the same (cluster-wide) numbers: aggregate with max, not sum.
import { type Kysely, sql } from 'kysely';
import type { Tables } from '../store/schema.js';
import { type Metrics, type Sample, sharedRead } from './metrics.js';

interface TypeRow {
  type: string;
  due: number | string | null;
  scheduled: number | string | null;
  running: number | string | null;
  dead: number | string | null;
  oldest_due: number | string | null;
}

export function registerJobMetrics(metrics: Metrics, db: Kysely<Tables>, now: () => number = Date.now): void {
  // Types seen once keep reporting (zero) after their jobs are gone, so a drained queue reads 0, not absent.
  const seen = new Set<string>();
  const query = async (at: number): Promise<TypeRow[]> => {
    const due = sql<boolean>`status = 'queued' and run_at <= ${at}`;
    const result = await db
      .selectFrom('jobs')
      .select((eb) => [
        'type',
        eb.fn.sum<number>(sql`case when ${due} then 1 else 0 end`).as('due'),
        eb.fn.sum<number>(sql`case when status = 'queued' and run_at > ${at} then 1 else 0 end`).as('scheduled'),
        eb.fn.sum<number>(sql`case when status = 'running' then 1 else 0 end`).as('running'),
        eb.fn.sum<number>(sql`case when status = 'dead' then 1 else 0 end`).as('dead'),
        eb.fn.min<number>(sql`case when ${due} then run_at end`).as('oldest_due'),
      ])
      .where('status', 'in', ['queued', 'running', 'dead'])
      .groupBy('type')
      .execute();
    for (const r of result) seen.add(r.type);
    return result;
  };
  const rows = sharedRead(() => query(now()), 1000, now);
  const per = (pick: (r: TypeRow, t: number) => number) => async (): Promise<Sample<'type'>[]> => {
    const t = now();
    const byType = new Map((await rows()).map((r) => [r.type, r]));
    return [...seen].map((type) => {
      const r = byType.get(type);
      return { labels: { type }, value: r ? pick(r, t) : 0 };
    });
  };
  metrics.sampled('nube_jobs_due', 'Queued jobs whose time has come and that no worker has taken yet (queue depth)', ['type'], per((r) => Number(r.due ?? 0)));
  metrics.sampled(
    'nube_jobs_oldest_due_age_seconds',
    'How long the oldest due job has waited for a worker (0 when none is due)',
    ['type'],
    per((r, t) => (r.oldest_due === null ? 0 : Math.max(0, (t - Number(r.oldest_due)) / 1000))),
  );
  metrics.sampled('nube_jobs_scheduled', 'Queued jobs not due yet (timers, retries waiting their backoff)', ['type'], per((r) => Number(r.scheduled ?? 0)));
  metrics.sampled('nube_jobs_running', 'Jobs leased by a worker (including expired leases not yet taken over)', ['type'], per((r) => Number(r.running ?? 0)));
  metrics.sampled('nube_jobs_dead', 'Jobs that ran out of attempts, kept for 7 days', ['type'], per((r) => Number(r.dead ?? 0)));
}
