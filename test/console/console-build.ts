// The console tests need console/dist: build it when missing or stale (scripts/build-console.mjs skips
// an up-to-date build), one test file at a time (a lock on disk).
import { mkdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';

const LOCK = join(import.meta.dirname, '..', '..', 'console', '.build-lock');

export async function ensureConsoleBuilt(): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`console build lock ${LOCK} held for 2 minutes: remove it if no build runs`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    // @ts-expect-error: a plain .mjs script without types
    const { buildConsole } = (await import('../../scripts/build-console.mjs')) as { buildConsole: () => Promise<boolean> };
    await buildConsole();
  } finally {
    rmdirSync(LOCK);
  }
}
