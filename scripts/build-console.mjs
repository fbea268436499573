#!/usr/bin/env node
// Builds the web console (console/ -> console/dist, served by nube at /console) with Vite, then writes a
// gzip and a brotli copy of each text file so nube serves them compressed without work per request.
// Skips the build when console/dist was made from the same sources (console/ and the SDK it bundles).
// `npm run build` runs it; the console tests run it when console/dist is missing or stale.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const app = join(root, 'console');
const dist = join(app, 'dist');
const stampFile = join(dist, '.sources');

function files(dir, skip) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (skip(p)) continue;
    if (e.isDirectory()) out.push(...files(p, skip));
    else out.push(p);
  }
  return out;
}

export function consoleFingerprint() {
  const h = createHash('sha256');
  const inputs = [
    ...files(app, (p) => p === dist || p.endsWith('node_modules')),
    ...files(join(root, 'packages/sdk/src'), () => false),
    join(root, 'package-lock.json'),
  ].sort();
  for (const f of inputs) h.update(relative(root, f)).update('\0').update(readFileSync(f)).update('\0');
  return h.digest('hex');
}

export async function buildConsole({ force = false } = {}) {
  // A tree without the console's sources (a miniature checkout in the tests) has nothing to build.
  if (!existsSync(join(app, 'index.html'))) return false;
  const hash = consoleFingerprint();
  if (!force && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === hash) return false;
  const { build } = await import('vite');
  await build({ configFile: join(app, 'vite.config.mjs'), logLevel: 'warn' });
  for (const f of files(dist, () => false)) {
    if (!/\.(js|css|html|svg|json)$/.test(f)) continue;
    const body = readFileSync(f);
    writeFileSync(`${f}.gz`, gzipSync(body, { level: 9 }));
    writeFileSync(`${f}.br`, brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }));
  }
  writeFileSync(stampFile, `${hash}\n`);
  return true;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const started = Date.now();
  buildConsole({ force: process.argv.includes('--force') }).then(
    (built) => console.error(built ? `built console/dist in ${((Date.now() - started) / 1000).toFixed(1)} s` : 'console/dist is up to date'),
    (e) => {
      console.error(`console build failed: ${e.message}`);
      process.exit(1);
    },
  );
}
