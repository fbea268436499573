// The suite's own PostgreSQL and Redis (test/services.ts, issue 38): with nothing at the configured
// addresses it starts throwaway servers that answer, and removes them and their files when done; a
// leftover of a run that was killed is removed at the next start, one of a live run is not.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { answers, ensureServices, removeLeftovers } from '../services.js';

describe('the test suite starts its own PostgreSQL and Redis when none answers', () => {
  it('starts both, they answer, and stopping removes them', async () => {
    const env: NodeJS.ProcessEnv = { NUBE_TEST_PG_URL: 'postgres://postgres@127.0.0.1:1/postgres', NUBE_TEST_REDIS_URL: 'redis://127.0.0.1:2' };
    const before = new Set(readdirSync(tmpdir()).filter((n) => n.startsWith('nube-test-services-')));
    const stop = await ensureServices(env);
    expect(env.NUBE_TEST_PG_URL).not.toContain(':1/');
    expect(await answers(env.NUBE_TEST_REDIS_URL!)).toBe(true);
    const c = new pg.Client({ connectionString: env.NUBE_TEST_PG_URL });
    await c.connect();
    expect((await c.query('SELECT 1 AS one')).rows[0].one).toBe(1);
    await c.end();
    stop();
    await expect.poll(() => answers(env.NUBE_TEST_PG_URL!), { timeout: 10_000 }).toBe(false);
    expect(await answers(env.NUBE_TEST_REDIS_URL!)).toBe(false);
    expect(readdirSync(tmpdir()).filter((n) => n.startsWith('nube-test-services-') && !before.has(n))).toEqual([]);
  }, 60_000);

  it('uses the configured servers when they answer, starting nothing', async () => {
    const env: NodeJS.ProcessEnv = { NUBE_TEST_PG_URL: process.env.NUBE_TEST_PG_URL, NUBE_TEST_REDIS_URL: process.env.NUBE_TEST_REDIS_URL };
    const stop = await ensureServices(env);
    expect(env).toEqual({ NUBE_TEST_PG_URL: process.env.NUBE_TEST_PG_URL, NUBE_TEST_REDIS_URL: process.env.NUBE_TEST_REDIS_URL });
    stop();
  });

  it('removes the leftovers of a killed run, never those of a live one', () => {
    const root = mkdtempSync(join(tmpdir(), 'nube-leftovers-'));
    try {
      const dead = join(root, 'nube-test-services-dead');
      const live = join(root, 'nube-test-services-live');
      for (const d of [dead, live]) mkdirSync(join(d, 'pg'), { recursive: true });
      writeFileSync(join(dead, 'owner.pid'), '999999999');
      writeFileSync(join(live, 'owner.pid'), String(process.pid));
      removeLeftovers(root);
      expect(readdirSync(root)).toEqual(['nube-test-services-live']);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
