import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { HEADER, generateSdkFiles } from '../scripts/sdk-generator.js';

const sdkDir = join(dirname(fileURLToPath(import.meta.url)), '..');

describe('generated SDK files', () => {
  it('match what the registry generates now (run `npm run gen:sdk` after changing an operation)', async () => {
    const files = await generateSdkFiles();
    expect(Object.keys(files).sort()).toEqual(['openapi.json', 'src/api.gen.ts', 'src/operations.gen.ts']);
    for (const [rel, text] of Object.entries(files)) {
      const committed = readFileSync(join(sdkDir, rel), 'utf8');
      expect(committed, `packages/sdk/${rel} is stale: run npm run gen:sdk`).toBe(text);
      if (rel.endsWith('.gen.ts')) expect(committed.startsWith(HEADER)).toBe(true);
    }
  });

  it('is deterministic: two runs give the same bytes', async () => {
    const [a, b] = [await generateSdkFiles(), await generateSdkFiles()];
    expect(a).toEqual(b);
  });
});
