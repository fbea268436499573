import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateSdkFiles } from '../../packages/sdk/scripts/sdk-generator.js';
import { operations } from '../../src/areas/index.js';
import { API_DOC_PATH, buildApiDoc } from '../../src/platform/api-doc.js';

// docs/api.md documents the API from inside the repository; it is generated, so it cannot drift.

describe('docs/api.md', () => {
  it('matches what the registry generates now (run `npm run gen:sdk` after changing an operation)', async () => {
    const files = await generateSdkFiles();
    const expected = buildApiDoc(JSON.parse(files['openapi.json']!));
    const committed = readFileSync(join(import.meta.dirname, '../..', API_DOC_PATH), 'utf8');
    expect(committed === expected, `${API_DOC_PATH} is stale: run npm run gen:sdk`).toBe(true);
  });

  it('names every operation of the registry, and the ones not implemented yet as such', () => {
    const lines = readFileSync(join(import.meta.dirname, '../..', API_DOC_PATH), 'utf8').split('\n');
    for (const op of operations) {
      const at = lines.findIndex((l) => l.startsWith(`Operation \`${op.id}\``));
      expect(at, op.id).toBeGreaterThan(0);
      // The summary line above it says whether the operation answers 501.
      expect(lines[at - 2]!.includes('(not implemented yet: answers 501)'), op.id).toBe(!op.handler);
    }
  });
});
