import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageCounters } from './usage.js';

const dir = mkdtempSync(path.join(tmpdir(), 'nube-usage-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('usage counters file', () => {
  it('survives two writers on one directory flushing at once (a restart while the old engine still flushes)', async () => {
    const a = new UsageCounters(dir, 60_000);
    const b = new UsageCounters(dir, 60_000);
    const flushes: Promise<void>[] = [];
    for (let i = 0; i < 50; i++) {
      a.add('x', 1, 0);
      b.add('y', 0, 1);
      flushes.push(a.flush(), b.flush());
    }
    await Promise.all(flushes);
    const saved = JSON.parse(readFileSync(path.join(dir, 'usage.json'), 'utf8')) as Record<string, unknown>;
    expect(saved.x ?? saved.y).toBeDefined();
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    // A later engine reads what the last flush wrote (one writer's counts: each writes all it has).
    expect(new UsageCounters(dir).get('y').rowsWritten + new UsageCounters(dir).get('x').rowsRead).toBe(50);
  });
});
