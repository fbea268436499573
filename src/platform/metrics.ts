// The Prometheus registry of one nube process. Platform owns it; areas add their series through
// `deps.metrics` (counters they increment where things happen, and samples read at scrape time), so
// nothing here knows an area. Rendered by GET /metrics (platform/metrics-http.ts) when configured.
import { Counter, collectDefaultMetrics, Gauge, type Metric, Registry } from 'prom-client';
import { FastHistogram } from './fast-histogram.js';

export interface Sample<L extends string = string> {
  labels?: Partial<Record<L, string>>;
  value: number;
}

type Warn = (obj: Record<string, unknown>, msg: string) => void;

const NAME = /^nube_[a-z0-9_]+$/;

export class Metrics {
  readonly registry = new Registry();
  private readonly collectErrors: Counter<'metric'>;

  constructor(private readonly warn: Warn = () => {}) {
    this.collectErrors = this.counter(
      'nube_metrics_collect_errors_total',
      'Scrapes where reading a sampled metric failed (the metric is left out of that scrape)',
      ['metric'],
    );
  }

  /** Process metrics (CPU, memory, event loop lag, GC); only when /metrics is served, they cost a timer. */
  collectProcessMetrics(): void {
    collectDefaultMetrics({ register: this.registry });
  }

  /** A count that only goes up, incremented by its owner where the thing happens (per process). */
  counter<L extends string>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return new Counter({ name: checked(name), help, labelNames, registers: [this.registry] });
  }

  /** A histogram for hot paths (the request path): observing is an array increment (fast-histogram.ts). */
  fastHistogram<L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]): FastHistogram<L> {
    const h = new FastHistogram(checked(name), help, labelNames, buckets);
    // The registry renders any object with name, help, type and get(); prom-client's type lists its own classes.
    this.registry.registerMetric(h as unknown as Metric);
    return h;
  }

  /**
   * A gauge whose values are read when Prometheus scrapes (queue depth from the store, a pool's size).
   * Each read replaces the previous one: a label set the read leaves out is dropped, so a reader that
   * wants a zero for an empty state returns it. A failing read leaves the metric out of that scrape,
   * is logged and counted in nube_metrics_collect_errors_total.
   */
  sampled<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    read: () => Promise<Sample<L>[]> | Sample<L>[],
  ): void {
    const { warn, collectErrors } = this;
    new Gauge<L>({
      name: checked(name),
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        this.reset();
        try {
          for (const s of await read()) {
            if (s.labels) this.set(s.labels, s.value);
            else this.set(s.value);
          }
        } catch (err) {
          warn({ err, metric: name }, 'metric read failed; left out of this scrape');
          collectErrors.inc({ metric: name });
        }
      },
    });
  }

  /** The text exposition format (version 0.0.4). */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/**
 * One read shared by the gauges that come from it, and reused for `maxAgeMs`: a scrape collects every
 * gauge at once, so gauges over one query ask it once; a read that scans a table (bytes over every
 * file) can be kept longer than a scrape interval so the scraper is not a steady load on the store.
 */
export function sharedRead<T>(read: () => Promise<T>, maxAgeMs: number, now: () => number = Date.now): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    const t = now();
    if (!last || t - last.at >= maxAgeMs) last = { at: t, value: read() };
    return last.value;
  };
}

function checked(name: string): string {
  if (!NAME.test(name)) throw new Error(`metric ${name}: names are nube_ followed by [a-z0-9_]`);
  return name;
}
