#!/usr/bin/env node
// `npm start` / `npm run nube -- ...`: runs the compiled nube (dist/src/main.js) with these arguments.
// When dist/ was built from other sources than the checkout's (or not at all) it says so and builds
// first, so an edit is never followed by a start of the old code. An installed package has no src/
// beside dist/ and runs its dist/ as it is.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { builtFingerprint, fingerprint } from './source-fingerprint.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const main = join(root, 'dist/src/main.js');

if (existsSync(join(root, 'src/main.ts'))) {
  const built = builtFingerprint(root);
  if (built !== fingerprint(root)) {
    console.error(
      built === undefined
        ? 'nube: no build in dist/ yet: building it (npm run build) ...'
        : 'nube: dist/ was built from older sources than src/: rebuilding (npm run build) ...',
    );
    try {
      execFileSync(process.execPath, [join(root, 'scripts/build.mjs')], { stdio: 'inherit' });
    } catch {
      console.error('nube: the build failed (see above); not starting the old build.');
      process.exit(1);
    }
  }
}
// main.js parses process.argv itself: this script's own path stands where its would.
await import(pathToFileURL(main).href);
