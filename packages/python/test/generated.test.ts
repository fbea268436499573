import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generatePythonFiles, PY_HEADER } from '../scripts/python-generator.js';

const pyDir = join(dirname(fileURLToPath(import.meta.url)), '..');

describe('generated Python SDK files', () => {
  it('match what the registry generates now (run `npm run gen:python` after changing an operation)', () => {
    const files = generatePythonFiles();
    expect(Object.keys(files).sort()).toEqual([
      'src/nube/_aio_resources_gen.py',
      'src/nube/_operations_gen.py',
      'src/nube/_resources_gen.py',
      'src/nube/types.py',
    ]);
    for (const [rel, text] of Object.entries(files)) {
      const committed = readFileSync(join(pyDir, rel), 'utf8');
      expect(committed, `packages/python/${rel} is stale: run npm run gen:python`).toBe(text);
      expect(committed.startsWith(PY_HEADER)).toBe(true);
    }
  });

  it('is deterministic and names every primary operation once, sync and async alike', () => {
    const [a, b] = [generatePythonFiles(), generatePythonFiles()];
    expect(a).toEqual(b);
    const sync = a['src/nube/_resources_gen.py']!;
    const aio = a['src/nube/_aio_resources_gen.py']!;
    const ops = [...a['src/nube/_operations_gen.py']!.matchAll(/^ {4}"([^"]+)": Operation\(/gm)].map(
      (m) => m[1]!,
    );
    expect(ops.length).toBeGreaterThan(100);
    for (const id of ops) {
      const mentioned = `Operation \`${id}\``;
      const handWritten = id === 'sandboxes.terminal';
      const alias =
        /\.(get|post|put|patch|delete)$/.test(id) &&
        ops.includes(id.replace(/\.[a-z]+$/, '')) &&
        !sync.includes(mentioned);
      if (handWritten || alias) continue;
      expect(sync.includes(mentioned), id).toBe(true);
      expect(aio.includes(mentioned), id).toBe(true);
    }
  });
});
