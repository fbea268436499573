// The PostgreSQL and Redis the suite talks to (issue 38). The configured ones (NUBE_TEST_PG_URL,
// NUBE_TEST_REDIS_URL; by default 127.0.0.1:5432 and :6379) when they answer; otherwise throwaway ones
// started here: `initdb` into a temporary directory and `postgres` on a free loopback port with trust
// auth (as the `postgres` user: PostgreSQL refuses to run as root), `redis-server` on a free port saving
// nothing. Their addresses go to the tests in those two variables; they are stopped and removed when the
// suite ends, also when it is interrupted, and a leftover of a run that was killed is removed at the
// next start. A server the suite did not start is never touched but for the configured one.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LEFTOVER_PREFIX = 'nube-test-services-';
const DEFAULT_PG = 'postgres://postgres@127.0.0.1:5432/postgres';
const DEFAULT_REDIS = 'redis://127.0.0.1:6379';

export interface Started {
  url: string;
  stop(): void;
}

/** Whether something answers the protocol at `url` within a second: PostgreSQL's SSLRequest, Redis' PING. */
export function answers(url: string): Promise<boolean> {
  const u = new URL(url);
  const redis = u.protocol === 'redis:';
  const port = Number(u.port || (redis ? 6379 : 5432));
  return new Promise((resolve) => {
    const s = createConnection({ host: u.hostname, port });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.once('error', () => done(false));
    s.once('connect', () => {
      // PostgreSQL answers an SSLRequest with one byte, 'S' or 'N'; Redis answers PING with +PONG.
      s.write(redis ? '*1\r\n$4\r\nPING\r\n' : Buffer.from([0, 0, 0, 8, 4, 210, 22, 47]));
    });
    s.once('data', (d: Buffer) => done(redis ? d.toString().startsWith('+PONG') || d.toString().startsWith('-NOAUTH') : d[0] === 0x53 || d[0] === 0x4e));
  });
}

/** A loopback port free now (taken right after; a clash makes the server fail and another is tried). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Kills a leftover server only if that pid is still one of ours: it works in the leftover directory
 * (postgres chdirs to its data dir under it, redis-server was started there) or names it in its command
 * line. A pid reused by another process is left alone.
 */
function killLeftoverServer(pid: number | undefined, dir: string): void {
  if (!pid) return;
  let ours = false;
  try {
    ours = readlinkSync(`/proc/${pid}/cwd`).startsWith(dir) || readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir);
  } catch {
    return; // gone
  }
  if (!ours) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

/** The pid written by the run that made `dir`; null while it is being written or when missing. */
function ownerOf(dir: string): number | null {
  try {
    return Number(readFileSync(join(dir, 'owner.pid'), 'utf8').trim()) || null;
  } catch {
    return null;
  }
}

/** Directories of runs whose process is gone (killed before it could clean up): their servers and files go. */
export function removeLeftovers(root = tmpdir()): void {
  for (const name of readdirSync(root)) {
    if (!name.startsWith(LEFTOVER_PREFIX)) continue;
    const dir = join(root, name);
    const owner = ownerOf(dir);
    if (owner && alive(owner)) continue;
    // No owner yet: a run between making the directory and writing its pid, unless that was long ago.
    if (!owner && Date.now() - statSync(dir).mtimeMs < 60_000) continue;
    for (const pidFile of ['pg/postmaster.pid', 'redis.pid']) {
      const f = join(dir, pidFile);
      if (existsSync(f)) killLeftoverServer(Number(readFileSync(f, 'utf8').split('\n')[0]), dir);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A program on PATH, or (Debian's initdb and postgres) under /usr/lib/postgresql/<version>/bin. */
function findBin(name: string): string | null {
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    for (const v of readdirSync(base).sort().reverse()) if (existsSync(join(base, v, 'bin', name))) return join(base, v, 'bin', name);
  }
  try {
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

function postgresUser(): { uid: number; gid: number } {
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new Error("no PostgreSQL answers and there is no `postgres` user to run a throwaway one as: install Debian's postgresql (apt-get install postgresql)");
  }
}

async function waitFor(url: string, child: ChildProcess, log: () => string, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (await answers(url)) return;
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}: ${log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not answer within 30 s: ${log()}`);
}

function run(cmd: string, args: string[], opts: { uid?: number; gid?: number; cwd?: string }): { child: ChildProcess; log: () => string } {
  const child = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer) => {
    out = (out + d.toString()).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return { child, log: () => out };
}

export async function startPostgres(dir: string): Promise<Started> {
  const initdb = findBin('initdb');
  const postgres = findBin('postgres');
  if (!initdb || !postgres) {
    throw new Error("no PostgreSQL answers and initdb is missing: install Debian's postgresql (apt-get install postgresql), or set NUBE_TEST_PG_URL");
  }
  const user = postgresUser();
  const data = join(dir, 'pg');
  mkdirSync(data, { mode: 0o700 });
  chownSync(dir, user.uid, user.gid);
  chownSync(data, user.uid, user.gid);
  execFileSync(initdb, ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'], { uid: user.uid, gid: user.gid, cwd: dir, stdio: 'pipe' });
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const { child, log } = run(postgres, ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=300'], {
      ...user,
      cwd: dir,
    });
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    try {
      await waitFor(url, child, log, 'the throwaway PostgreSQL');
      return { url, stop: () => child.kill('SIGINT') };
    } catch (e) {
      child.kill('SIGKILL');
      // A port taken between the check and the start: another one.
      if (attempt < 3 && /could not bind|Address already in use/.test(String((e as Error).message))) continue;
      throw e;
    }
  }
}

export async function startRedis(dir: string): Promise<Started> {
  const bin = findBin('redis-server');
  if (!bin) throw new Error("no Redis answers and redis-server is missing: install Debian's redis-server (apt-get install redis-server), or set NUBE_TEST_REDIS_URL");
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const { child, log } = run(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--pidfile', join(dir, 'redis.pid'), '--daemonize', 'no'], { cwd: dir });
    const url = `redis://127.0.0.1:${port}`;
    try {
      await waitFor(url, child, log, 'the throwaway Redis');
      writeFileSync(join(dir, 'redis.pid'), String(child.pid));
      return { url, stop: () => child.kill('SIGKILL') };
    } catch (e) {
      child.kill('SIGKILL');
      if (attempt < 3 && /Address already in use/.test(String((e as Error).message))) continue;
      throw e;
    }
  }
}

/**
 * The suite's services: the configured ones, or throwaway ones. Sets NUBE_TEST_PG_URL and
 * NUBE_TEST_REDIS_URL for the test processes; returns what stops them.
 */
export async function ensureServices(env: NodeJS.ProcessEnv = process.env): Promise<() => void> {
  removeLeftovers();
  const pgUrl = env.NUBE_TEST_PG_URL ?? DEFAULT_PG;
  const redisUrl = env.NUBE_TEST_REDIS_URL ?? DEFAULT_REDIS;
  const [pgUp, redisUp] = await Promise.all([answers(pgUrl), answers(redisUrl)]);
  env.NUBE_TEST_PG_URL = pgUrl;
  env.NUBE_TEST_REDIS_URL = redisUrl;
  if (pgUp && redisUp) return () => {};
  const dir = mkdtempSync(join(tmpdir(), LEFTOVER_PREFIX));
  writeFileSync(join(dir, 'owner.pid'), String(process.pid));
  const started: Started[] = [];
  const stop = () => {
    for (const s of started.splice(0)) s.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = (sig: NodeJS.Signals) => {
    stop();
    process.kill(process.pid, sig);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('exit', stop);
  try {
    if (!pgUp) {
      const s = await startPostgres(dir);
      started.push(s);
      env.NUBE_TEST_PG_URL = s.url;
      process.stderr.write(`no PostgreSQL at ${pgUrl}: the suite started a throwaway one at ${s.url}\n`);
    }
    if (!redisUp) {
      const s = await startRedis(dir);
      started.push(s);
      env.NUBE_TEST_REDIS_URL = s.url;
      process.stderr.write(`no Redis at ${redisUrl}: the suite started a throwaway one at ${s.url}\n`);
    }
  } catch (e) {
    stop();
    throw e;
  }
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('exit', stop);
    stop();
  };
}
