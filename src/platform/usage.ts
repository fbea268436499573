import { type Kysely, type Migration, sql } from 'kysely';
import type { Tables } from '../store/schema.js';
import type { Principal } from './auth.js';
import { errors } from './errors.js';
import type { CapMetric } from './scopes.js';

/** Monthly metered quantities (AI credits, LLM tokens, web queries) and live gauges per owner. */
export type CounterMetric = 'aiCredits' | 'llmTokens' | 'webQueries' | 'machineChargesCentavos' | 'sandboxCpuMs';
/** What a key's caps are checked against: its own counters (`key:<id>`). */
type KeyMetric = 'aiCredits' | 'llmTokens' | 'webQueries' | 'sandboxCpuMs';
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

/** The key a principal's consumption is also counted under: a scoped key with caps; else none. */
export function capKeyId(p: Principal): string | null {
  return p.scope?.caps && p.credentialId ? p.credentialId : null;
}

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
  async addForKey(p: Principal, metric: KeyMetric, amount: number, now = new Date()): Promise<void> {
    const keyId = capKeyId(p);
    if (keyId) await this.addToKey(keyId, metric, amount, now);
  }

  /** The same by key id alone: work a key started and another path meters (an agent's turn, a sandbox's CPU). */
  async addToKey(keyId: string, metric: KeyMetric, amount: number, now = new Date()): Promise<void> {
    if (amount > 0) await this.add(`key:${keyId}`, metric, amount, now);
  }

  /**
   * 402 KeyCapReached when the key has used up a cap on what it is about to consume (`metrics`: the
   * caps that matter to the call; a web query's are AI credits and web queries).
   */
  async assertKeyCaps(p: Principal, metrics: readonly CapMetric[] = ['webQueries', 'aiCredits'], now = new Date()): Promise<void> {
    const caps = p.scope?.caps;
    if (!caps || !p.credentialId) return;
    const asked = metrics.filter((m) => caps[m] !== undefined);
    if (!asked.length) return;
    const who = `key:${p.credentialId}`;
    const read = async (m: CapMetric): Promise<number> => {
      if (m === 'aiCredits') return (await this.counter(who, 'webQueries', now)) + (await this.counter(who, 'aiCredits', now));
      // CPU is counted in milliseconds (a sandbox's small slices add up) and capped in seconds.
      if (m === 'sandboxCpuSeconds') return (await this.counter(who, 'sandboxCpuMs', now)) / 1000;
      return this.counter(who, m, now);
    };
    for (const m of asked) {
      const cap = caps[m]!;
      const used = await read(m);
      if (used >= cap) {
        throw errors.paymentRequired(`this key's monthly ${m} cap (${cap}) is reached; ${used} used this month`, 'KeyCapReached', { cap: m, limit: cap, used });
      }
    }
  }
}
