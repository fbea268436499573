import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../store/schema.js';
import type { Principal } from './auth.js';
import { errors } from './errors.js';

/** Monthly metered quantities (AI credits, LLM tokens, web queries) and live gauges per owner. */
export type CounterMetric = 'aiCredits' | 'llmTokens' | 'webQueries' | 'machineChargesCentavos';
export type GaugeMetric = 'storageBytes' | 'databases' | 'boxes' | 'sandboxes' | 'agents' | 'volumes' | 'volumeBytes';

interface MeterTable {
  owner_id: string;
  metric: string;
  period: string;
  value: number;
}

declare module '../store/schema.js' {
  interface Tables {
    usage_counters: MeterTable;
  }
}

export const usageMigrations: Record<string, Migration> = {
  '0003-platform-usage': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('usage_counters')
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('metric', 'text', (c) => c.notNull())
        .addColumn('period', 'text', (c) => c.notNull())
        .addColumn('value', 'bigint', (c) => c.notNull().defaultTo(0))
        .addPrimaryKeyConstraint('usage_counters_pk', ['owner_id', 'metric', 'period'])
        .execute();
    },
  },
};

export function currentPeriod(now = new Date()): string {
  return now.toISOString().slice(0, 7);
}

/** A gauge an area reports without anyone reading its tables: e.g. files reports storageBytes. */
export type GaugeSource = (ownerId: string) => Promise<number>;

export class Usage {
  private readonly gauges = new Map<GaugeMetric, GaugeSource[]>();
  constructor(private readonly db: Kysely<Tables>) {}

  registerGauge(metric: GaugeMetric, source: GaugeSource): void {
    this.gauges.set(metric, [...(this.gauges.get(metric) ?? []), source]);
  }

  async gauge(metric: GaugeMetric, ownerId: string): Promise<number> {
    let total = 0;
    for (const s of this.gauges.get(metric) ?? []) total += await s(ownerId);
    return total;
  }

  async add(ownerId: string, metric: CounterMetric, amount: number, now = new Date()): Promise<void> {
    const period = currentPeriod(now);
    await this.db
      .insertInto('usage_counters')
      .values({ owner_id: ownerId, metric, period, value: amount })
      .onConflict((oc) => oc.columns(['owner_id', 'metric', 'period']).doUpdateSet({ value: sql`usage_counters.value + ${amount}` }))
      .execute();
  }

  async counter(ownerId: string, metric: CounterMetric, now = new Date()): Promise<number> {
    const row = await this.db
      .selectFrom('usage_counters')
      .select('value')
      .where('owner_id', '=', ownerId)
      .where('metric', '=', metric)
      .where('period', '=', currentPeriod(now))
      .executeTakeFirst();
    return Number(row?.value ?? 0);
  }

  /**
   * What a scoped key with caps consumed is counted under `key:<keyId>` too (beside its owner's total),
   * so its monthly caps can be checked. Web queries count toward the key's AI credits, as they do for
   * the account's.
   */
  async addForKey(p: Principal, metric: 'webQueries' | 'aiCredits', amount: number, now = new Date()): Promise<void> {
    if (p.scope?.caps && p.credentialId && amount > 0) await this.add(`key:${p.credentialId}`, metric, amount, now);
  }

  /** 402 KeyCapReached when the key has used up a cap on what it is about to consume. */
  async assertKeyCaps(p: Principal, now = new Date()): Promise<void> {
    const caps = p.scope?.caps;
    if (!caps || !p.credentialId) return;
    const who = `key:${p.credentialId}`;
    const [web, ai] = await Promise.all([this.counter(who, 'webQueries', now), this.counter(who, 'aiCredits', now)]);
    const used = { webQueries: web, aiCredits: web + ai };
    for (const m of ['webQueries', 'aiCredits'] as const) {
      const cap = caps[m];
      if (cap !== undefined && used[m] >= cap) {
        throw errors.paymentRequired(`this key's monthly ${m} cap (${cap}) is reached; ${used[m]} used this month`, 'KeyCapReached', { cap: m, limit: cap, used: used[m] });
      }
    }
  }
}
