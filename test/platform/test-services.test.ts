// The suite's own PostgreSQL and Redis (test/services.ts, issue 38): with nothing at the configured
// addresses it starts throwaway servers that answer, and removes them and their files when done; a
// leftover of a run that was killed is removed at the next start, one of a live run is not.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
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

  it('kills a leftover server only while its pid is still that server, and waits for a pid being written', () => {
    const root = mkdtempSync(join(tmpdir(), 'nube-leftovers-'));
    // A process that is not one of the suite's servers, holding the pid a leftover's pid file names.
    const stranger = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      const dead = join(root, 'nube-test-services-dead');
      mkdirSync(join(dead, 'pg'), { recursive: true });
      writeFileSync(join(dead, 'owner.pid'), '999999999');
      writeFileSync(join(dead, 'redis.pid'), String(stranger.pid));
      // Made a moment ago, its owner's pid not written yet: a run starting now, not a leftover.
      const starting = join(root, 'nube-test-services-starting');
      mkdirSync(starting);
      removeLeftovers(root);
      expect(readdirSync(root)).toEqual(['nube-test-services-starting']);
      // Still running (a killed child would be a zombie until reaped: its state says Z).
      expect(readFileSync(`/proc/${stranger.pid}/stat`, 'utf8').split(' ')[2]).toMatch(/^[RS]$/);
      // Long without an owner: a run killed before it wrote its pid. Removed.
      const old = new Date(Date.now() - 120_000);
      utimesSync(starting, old, old);
      removeLeftovers(root);
      expect(readdirSync(root)).toEqual([]);
    } finally {
      stranger.kill('SIGKILL');
      rmSync(root, { recursive: true, force: true });
    }
  });
});
