import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import { parseSlt, runSlt, SLT_CORPUS_DIR, sltFiles } from './sqllogictest.js';

const ROOT = SLT_CORPUS_DIR;

describe('sqllogictest corpus through the engine', () => {
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

  const files = sltFiles(ROOT);
  it('finds the corpus', () => {
    expect(files.length).toBeGreaterThanOrEqual(14);
  });

  for (const file of files) {
    const name = path.relative(ROOT, file);
    it(`passes every record of ${name}`, async () => {
      const id = `slt-${name.replace(/[^A-Za-z0-9]/g, '-')}`;
      await engine.create(id);
      const records = parseSlt(readFileSync(file, 'utf8'));
      const report = await runSlt(name, records, (sql) => engine.query(id, { sql }));
      expect(report.failures.slice(0, 5)).toEqual([]);
      expect(report.passed).toBeGreaterThan(0);
      await engine.delete(id);
    }, 60_000);
  }
});
