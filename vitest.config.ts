import { defineConfig } from 'vitest/config';
import SlowestFirst from './test/sequencer.js';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'packages/sdk/test/**/*.test.ts', 'packages/python/test/**/*.test.ts'],
    // The PostgreSQL and Redis the suite needs: the configured ones, or throwaway ones (test/services.ts).
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Most tests wait on servers, sandboxes, browsers and child processes rather than compute: three
    // files at once on a 2-core machine keeps the whole suite well under CI's budget (one at a time,
    // vitest's default there, took over 25 minutes for 111 files).
    maxWorkers: 3,
    minWorkers: 1,
    // CI runs the whole suite on 2 cores with real servers, sandboxes and PostgreSQL at once; a test
    // that fails there is run once more and the retry is reported. Known load-dependent flake: see
    // docs/decisions.md "Tests under load".
    retry: process.env.CI ? 1 : 0,
    reporters: ['default'],
    // The slowest files start first (test/durations.json), so no long file runs alone at the end.
    sequence: { sequencer: SlowestFirst },
  },
});
