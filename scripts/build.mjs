#!/usr/bin/env node
// `npm run build`: compiles nube to dist/ (tsc, tests left out), copies the non-TypeScript files the
// code reads beside itself, stamps dist/build-info.json with the sources' fingerprint, then builds the
// SDK (packages/sdk/dist) and the web console (console/dist, scripts/build-console.mjs). The new tree is built aside and swapped in, so a failed build leaves the
// previous one whole and two builds at once do not mix their files.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildConsole } from './build-console.mjs';
import { fingerprint, isAsset, sourceFiles } from './source-fingerprint.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const started = Date.now();
const hash = fingerprint(root);
const staging = join(root, `.dist-${process.pid}`);
rmSync(staging, { recursive: true, force: true });
try {
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', staging], {
    stdio: 'inherit',
  });
  for (const rel of sourceFiles(root).filter(isAsset)) {
    mkdirSync(dirname(join(staging, rel)), { recursive: true });
    copyFileSync(join(root, rel), join(staging, rel));
  }
  writeFileSync(
    join(staging, 'build-info.json'),
    `${JSON.stringify({ sources: hash, builtAt: new Date().toISOString() }, null, 2)}\n`,
  );
  const dist = join(root, 'dist');
  const old = join(root, `.dist-old-${process.pid}`);
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(staging, dist);
  rmSync(old, { recursive: true, force: true });
} catch (e) {
  rmSync(staging, { recursive: true, force: true });
  console.error(`nube build failed${e.status ? ` (tsc exited ${e.status})` : `: ${e.message}`}`);
  process.exit(1);
}
execFileSync(process.execPath, [tsc, '-p', join(root, 'packages/sdk/tsconfig.build.json')], { stdio: 'inherit' });
try {
  await buildConsole();
} catch (e) {
  console.error(`console build failed: ${e.message}`);
  process.exit(1);
}
console.error(`built dist/, packages/sdk/dist/ and console/dist/ in ${((Date.now() - started) / 1000).toFixed(1)} s`);
