import { TEST_REDIS_URL } from '../helpers/redis.js';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startS3rver, type S3rverHandle } from '../../src/blob/s3rver-harness.js';
import { TEST_BRIDGE, TEST_ROOT } from '../../src/areas/sandboxes/runtime/namespaces/test-env.js';
import { createTempDatabase } from '../helpers/pg.js';
import { startNube } from '../helpers/server.js';
import { type Running, startSearxng } from '../web/sites.js';

const run = promisify(execFile);
const dirs: string[] = [];
const tempDir = (tag: string) => {
  const d = mkdtempSync(join(tmpdir(), `nube-doctor-${tag}-`));
  dirs.push(d);
  return d;
};

/** `nube doctor` in a child process, as an operator runs it; never throws on a non-zero exit. */
async function doctor(env: Record<string, string>): Promise<{ code: number; out: string; lines: string[] }> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('NUBE_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL'),
  );
  try {
    const { stdout } = await run('npx', ['tsx', 'src/main.ts', 'doctor'], { env: { ...clean, ...env }, cwd: process.cwd() });
    return { code: 0, out: stdout, lines: stdout.split('\n') };
  } catch (e) {
    const err = e as { code: number; stdout: string };
    return { code: err.code, out: err.stdout, lines: err.stdout.split('\n') };
  }
}

/** The report's line for a check whose text contains `contains` (status column first). */
function line(lines: string[], check: string, contains = ''): string {
  const hit = lines.find((l) => l.slice(6).startsWith(check) && l.includes(contains));
  if (!hit) throw new Error(`no line for ${check} containing "${contains}" in:\n${lines.join('\n')}`);
  return hit;
}

/** A loopback port nothing listens on (just released by a server of our own). */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

let s3: S3rverHandle;
let searx: Running;
const pg: { url: string; drop(): Promise<void> }[] = [];

beforeAll(async () => {
  s3 = await startS3rver(tempDir('s3'), ['nube-doctor']);
  searx = await startSearxng();
}, 60_000);
afterAll(async () => {
  await s3?.stop();
  await searx?.close();
  for (const d of pg) await d.drop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('nube doctor', () => {
  it('passes a healthy set-up: PostgreSQL migrated, Redis, S3, search, sandbox host; exit 0', async () => {
    const db = await createTempDatabase('doctor');
    pg.push(db);
    const dataDir = tempDir('ok');
    const env = {
      NUBE_DATA_DIR: dataDir,
      NUBE_SECRET: 's'.repeat(40),
      DATABASE_URL: db.url,
      REDIS_URL: TEST_REDIS_URL,
      NUBE_BLOB_BACKEND: 's3',
      NUBE_S3_ENDPOINT: s3.endpoint,
      NUBE_S3_BUCKET: 'nube-doctor',
      NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      NUBE_WEB_SEARCH_URL: searx.url,
      NUBE_SANDBOX_BRIDGE: `${TEST_BRIDGE.name}:${TEST_BRIDGE.cidr}`,
      NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`,
    };
    // A nube has run on this store once, so every migration is applied.
    const served = await startNube({ dataDir, env, listen: false });
    await served.close();

    const r = await doctor(env);
    expect(r.lines.filter((l) => l.startsWith('FAIL'))).toEqual([]);
    expect(r.code).toBe(0);
    expect(line(r.lines, 'metadata store')).toMatch(/^ok .*PostgreSQL .*migrations applied, none pending/);
    expect(line(r.lines, 'redis')).toMatch(/^ok .*reachable/);
    expect(line(r.lines, 'file storage')).toMatch(/^ok .*S3 bucket nube-doctor .*listed/);
    expect(line(r.lines, 'web search')).toMatch(/^ok .*answered a query with 3 results/);
    expect(line(r.lines, 'data directory')).toMatch(/^ok .*writable/);
    for (const check of ['user', 'packages', 'user namespaces', 'cgroups', 'cgroup migrations', 'nftables', 'bridge subnet', 'store']) {
      expect(line(r.lines, `sandboxes: ${check}`)).toMatch(/^ok /);
    }
    expect(line(r.lines, 'sandboxes: templates', 'base:')).toMatch(/base: (built|being built|not built)/);
    expect(r.out).toMatch(/\n\n(all good|nothing blocks nube)/);
  }, 180_000);

  it('names what to fix for an unreachable DATABASE_URL, an overlapping bridge subnet, a missing bucket and a dead search; exit 1', async () => {
    const deadPort = await freePort();
    const r = await doctor({
      NUBE_DATA_DIR: tempDir('broken'),
      NUBE_SECRET: 's'.repeat(40),
      DATABASE_URL: 'postgres://postgres:hunter2@127.0.0.1:1/nube',
      // 127.1.0.1/16 lies inside lo's 127.0.0.0/8.
      NUBE_SANDBOX_BRIDGE: 'nubedr0:127.1.0.1/16',
      NUBE_BLOB_BACKEND: 's3',
      NUBE_S3_ENDPOINT: s3.endpoint,
      NUBE_S3_BUCKET: 'no-such-bucket',
      NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      NUBE_WEB_SEARCH_URL: `http://127.0.0.1:${deadPort}`,
    });
    expect(r.code).toBe(1);
    const store = line(r.lines, 'metadata store');
    expect(store).toMatch(/^FAIL .*nothing listens at 127\.0\.0\.1:1 -> start PostgreSQL there, or set DATABASE_URL/);
    expect(store).not.toContain('hunter2');
    expect(line(r.lines, 'sandboxes: bridge subnet')).toMatch(
      /^FAIL .*127\.1\.0\.0\/16 overlaps lo's 127\.0\.0\.1\/8 -> set NUBE_SANDBOX_BRIDGE=nubedr0:10\.\d+\.0\.1\/16 \(free on this host\)/,
    );
    expect(line(r.lines, 'file storage')).toMatch(/^FAIL .*no-such-bucket.*NoSuchBucket.* -> create bucket no-such-bucket/);
    // Search down does not stop nube: a warning.
    expect(line(r.lines, 'web search')).toMatch(/^WARN .*ECONNREFUSED.* -> start the instance/);
    expect(r.out).toMatch(/3 problems \(FAIL\)/);
  }, 180_000);

  it('tells a store with pending migrations (warning) from one migrated by a newer nube (failure)', async () => {
    const dataDir = tempDir('sqlite');
    const env = { NUBE_DATA_DIR: dataDir, NUBE_SANDBOX_BRIDGE: `${TEST_BRIDGE.name}:${TEST_BRIDGE.cidr}` };
    const served = await startNube({ dataDir, listen: false });
    await served.close();
    const file = join(dataDir, 'nube.db');
    const db = new Database(file);
    const last = (db.prepare('select name from nube_migrations order by name desc limit 1').get() as { name: string }).name;
    db.prepare('delete from nube_migrations where name = ?').run(last);
    db.close();
    const pending = await doctor(env);
    expect(line(pending.lines, 'metadata store')).toMatch(/^WARN .*1 migration pending -> they apply at the next start/);
    expect(line(pending.lines, 'metadata store')).not.toMatch(/^FAIL/);

    const db2 = new Database(file);
    db2.prepare('insert into nube_migrations (name, timestamp) values (?, ?)').run('9999-future-thing', new Date().toISOString());
    db2.close();
    const newer = await doctor(env);
    expect(newer.code).toBe(1);
    expect(line(newer.lines, 'metadata store')).toMatch(/^FAIL .*migrated by a newer nube .*9999-future-thing\) -> run the nube version/);
  }, 180_000);

  it('reports a bad configuration as a failure naming the variable', async () => {
    const r = await doctor({ NUBE_DATA_DIR: tempDir('cfg'), NUBE_PORT: 'x' });
    expect(r.code).toBe(1);
    expect(line(r.lines, 'configuration')).toMatch(/^FAIL .*NUBE_PORT.* -> correct the variables/);
  }, 120_000);
});
