import { Histogram, type Metric, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { FastHistogram } from './fast-histogram.js';

const BUCKETS = [0.001, 0.01, 0.1, 1];
const sortedLines = (text: string) =>
  text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    // prom-client puts `le` first, FastHistogram last: compare label sets, not their order.
    .map((l) => {
      const m = /^(\w+)\{(.*)\} (.+)$/.exec(l)!;
      return `${m[1]}{${m[2]!.split(',').sort().join(',')}} ${m[3]}`;
    })
    .sort();

describe('FastHistogram', () => {
  it('renders exactly what prom-client renders for the same observations', async () => {
    const theirs = new Registry();
    const ours = new Registry();
    const ref = new Histogram({ name: 'h', help: 'help', labelNames: ['op', 'cls'], buckets: BUCKETS, registers: [theirs] });
    const fast = new FastHistogram('h', 'help', ['op', 'cls'] as const, BUCKETS);
    ours.registerMetric(fast as unknown as Metric);
    const values = [0, 0.0005, 0.001, 0.002, 0.01, 0.5, 1, 3, 1e9];
    for (const [op, cls] of [
      ['a.get', '2xx'],
      ['a.get', '4xx'],
      ['b "quoted"\\', '5xx'],
    ] as const) {
      const child = fast.child({ op, cls });
      for (const v of values) {
        child.observe(v);
        ref.observe({ op, cls }, v);
      }
    }
    const a = await theirs.metrics();
    const b = await ours.metrics();
    expect(sortedLines(b)).toEqual(sortedLines(a));
    expect(b).toContain('# TYPE h histogram');
    expect(b).toContain('h_bucket{op="b \\"quoted\\"\\\\",cls="5xx",le="+Inf"} 9');
  });

  it('keeps one series per label set however often a child is asked for', async () => {
    const fast = new FastHistogram('h', 'help', ['op'] as const, BUCKETS);
    fast.child({ op: 'x' }).observe(0.5);
    fast.child({ op: 'x' }).observe(0.5);
    const { values } = await fast.get();
    expect(values.find((v) => v.metricName === 'h_count')).toMatchObject({ labels: { op: 'x' }, value: 2 });
  });
});
