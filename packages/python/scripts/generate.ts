import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generatePythonFiles } from './python-generator.js';

// `npm run gen:python`: regenerates the Python SDK's operation table, types and resource classes from the
// registry (packages/python/test/generated.test.ts fails when they are stale).
const pyDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
for (const [rel, text] of Object.entries(generatePythonFiles())) {
  const target = join(pyDir, rel);
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(target, text);
  console.log(`wrote packages/python/${rel} (${text.length} bytes)`);
}
