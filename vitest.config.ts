import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'packages/sdk/test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // CI runs the whole suite on 2 cores with real servers, sandboxes and PostgreSQL at once; a test
    // that fails there is run once more and the retry is reported. Known load-dependent flake: see
    // docs/decisions.md "Tests under load".
    retry: process.env.CI ? 1 : 0,
    reporters: ['default'],
  },
});
