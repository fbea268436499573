import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import { runSlt, SLT_SKIP, sltCorpus } from './sqllogictest.js';

describe.skipIf(SLT_SKIP)('sqllogictest corpus through the engine', () => {
  let dir: string;
  let engine: EmbeddedDatabaseEngine;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'nube-slt-'));
    // synchronous=normal only to keep the run short: the corpus checks results, not durability.
    engine = new EmbeddedDatabaseEngine({ dir, workers: 2, synchronous: 'normal' });
  });
  afterAll(async () => {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const cases = sltCorpus();
  it('finds the corpus', () => {
    expect(cases.length).toBeGreaterThanOrEqual(14);
  });

  for (const c of cases) {
    it(`passes every record of ${c.name}`, async () => {
      await engine.create(c.dbName);
      const report = await runSlt(c.name, c.records(), (sql) => engine.query(c.dbName, { sql }));
      expect(report.failures.slice(0, 5)).toEqual([]);
      expect(report.passed).toBeGreaterThan(0);
      await engine.delete(c.dbName);
    }, 60_000);
  }
});
