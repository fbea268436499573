import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { API_DOC_PATH, buildApiDoc } from '../../../src/platform/api-doc.js';
import { generateSdkFiles } from './sdk-generator.js';

// `npm run gen:sdk`: regenerates openapi.json, src/api.gen.ts and src/operations.gen.ts from the registry,
// and the API's reference for readers, docs/api.md, from the same OpenAPI document.
const sdkDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const files = await generateSdkFiles();
for (const [rel, text] of Object.entries(files)) {
  const target = join(sdkDir, rel);
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(target, text);
  console.log(`wrote packages/sdk/${rel} (${text.length} bytes)`);
}
const doc = buildApiDoc(JSON.parse(files['openapi.json']!));
writeFileSync(join(sdkDir, '../..', API_DOC_PATH), doc);
console.log(`wrote ${API_DOC_PATH} (${doc.length} bytes)`);
