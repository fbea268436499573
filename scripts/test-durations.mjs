#!/usr/bin/env node
// Rewrites test/durations.json (seconds per test file, read by test/sequencer.ts to start the slowest
// files first) from a vitest JSON report: `npx vitest run --reporter=json --outputFile=r.json`, then
// `node scripts/test-durations.mjs r.json`.
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';

const report = process.argv[2];
if (!report) {
  console.error('usage: node scripts/test-durations.mjs <vitest json report>');
  process.exit(2);
}
const root = new URL('..', import.meta.url).pathname;
const { testResults } = JSON.parse(readFileSync(report, 'utf8'));
const out = {};
for (const r of testResults) out[relative(root, r.name)] = Math.round((r.endTime - r.startTime) / 100) / 10;
const sorted = Object.fromEntries(Object.entries(out).sort(([, a], [, b]) => b - a));
writeFileSync(new URL('../test/durations.json', import.meta.url), `${JSON.stringify(sorted, null, 2)}\n`);
console.log(`test/durations.json: ${Object.keys(sorted).length} files`);
