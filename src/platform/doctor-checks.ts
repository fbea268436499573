// The platform's checks for `nube doctor`: Node.js, the configuration as a whole, the data directory,
// the metadata store (SQLite or PostgreSQL) and Redis. Areas add their own (AreaModule.doctor).
import { existsSync, readFileSync } from 'node:fs';
import { stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { Config } from './config-shape.js';
import { type CheckResult, canWrite, type DoctorCheck, errorText, fail, ok, redactUrl, skip, warn } from './doctor.js';

const MIN_NODE = [20, 18];
/** Below this, template builds (about 1 GB each), sandboxes and uploads soon fail for want of space. */
const MIN_FREE_BYTES = 5 * 1024 ** 3;

export function platformChecks(config: Config, migrationNames: string[]): DoctorCheck[] {
  return [
    { name: 'node', run: nodeVersion },
    { name: 'configuration', run: () => configuration(config) },
    { name: 'data directory', run: () => dataDirectory(config.dataDir) },
    {
      name: 'metadata store',
      run: () => (config.databaseUrl ? postgres(config.databaseUrl, migrationNames) : sqlite(config.dataDir, migrationNames)),
    },
    { name: 'redis', run: () => (config.redisUrl ? redis(config.redisUrl) : skip('REDIS_URL unset: rate limits and events stay in this process (one replica)')) },
  ];
}

function nodeVersion(): CheckResult {
  const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
  const good = major > MIN_NODE[0]! || (major === MIN_NODE[0] && minor >= MIN_NODE[1]!);
  return good
    ? ok(`Node.js ${process.versions.node}`)
    : fail(`Node.js ${process.versions.node} is too old`, `install Node.js ${MIN_NODE.join('.')} or newer`);
}

function configuration(config: Config): CheckResult[] {
  const out: CheckResult[] = [];
  const loopback = /^(127\.|::1$|localhost$)/.test(config.host);
  if (config.metrics.mode === 'public' && !loopback) {
    out.push(
      warn(
        `GET /metrics is public and nube listens on ${config.host}`,
        'set NUBE_METRICS_TOKEN instead of NUBE_METRICS_PUBLIC, or listen on a private address only',
      ),
    );
  }
  if (!loopback && !config.publicUrlFixed) {
    out.push(warn(`NUBE_HOST=${config.host} without NUBE_PUBLIC_URL: links handed to clients name the listen address`, 'set NUBE_PUBLIC_URL to the URL clients reach nube at'));
  }
  const secretFile = join(config.dataDir, 'secret.key');
  const generated = existsSync(secretFile) && readFileSync(secretFile, 'utf8').trim() === config.secret;
  if (config.databaseUrl && generated) {
    out.push(
      warn(
        'DATABASE_URL is set but the secret comes from this data directory: other replicas would not verify its URLs or open its sealed secrets',
        `set NUBE_SECRET to the same value on every replica (this one uses the content of ${secretFile})`,
      ),
    );
  }
  return out.length ? out : [ok(`valid; listening on ${config.host}:${config.port}, metrics ${config.metrics.mode}`)];
}

async function dataDirectory(dir: string): Promise<CheckResult[]> {
  const st = await stat(dir).catch(() => null);
  if (!st) return [fail(`${dir} does not exist`, `mkdir -p ${dir} (or set NUBE_DATA_DIR to an existing directory)`)];
  if (!st.isDirectory()) return [fail(`${dir} is not a directory`, 'set NUBE_DATA_DIR to a directory')];
  const w = await canWrite(dir);
  if (!w.ok) return [fail(`${dir} is not writable: ${w.why}`, 'chown the directory to the user running nube, or set NUBE_DATA_DIR elsewhere')];
  const out: CheckResult[] = [];
  if (st.mode & 0o002) out.push(warn(`${dir} is writable by every user`, `chmod o-w ${dir}`));
  const secret = join(dir, 'secret.key');
  const sst = await stat(secret).catch(() => null);
  if (sst && sst.mode & 0o077) out.push(warn(`${secret} is readable by other users (it signs URLs and seals secrets)`, `chmod 600 ${secret}`));
  const fs = await statfs(dir);
  const free = fs.bavail * fs.bsize;
  const gb = (free / 1024 ** 3).toFixed(1);
  if (free < MIN_FREE_BYTES) out.push(warn(`only ${gb} GB free under ${dir}`, 'free space or move NUBE_DATA_DIR: a template takes about 1 GB'));
  return out.length ? out : [ok(`${dir}: writable, ${gb} GB free`)];
}

/** What the store's applied migrations say about this nube's code. */
function migrationState(where: string, applied: string[], known: string[]): CheckResult {
  const have = new Set(applied);
  const mine = new Set(known);
  const unknown = applied.filter((n) => !mine.has(n));
  if (unknown.length) {
    return fail(
      `${where} was migrated by a newer nube (${unknown.length} migration${unknown.length === 1 ? '' : 's'} unknown here, e.g. ${unknown[0]})`,
      'run the nube version that migrated it, or point this one at another store',
    );
  }
  const pending = known.filter((n) => !have.has(n));
  if (applied.length === 0) return ok(`${where}: reachable and empty; nube creates its tables at start`);
  if (pending.length) {
    return warn(`${where}: ${pending.length} migration${pending.length === 1 ? '' : 's'} pending`, 'they apply at the next start, or now with `npm run nube -- migrate`');
  }
  return ok(`${where}: ${applied.length} migrations applied, none pending`);
}

function sqlite(dataDir: string, known: string[]): CheckResult {
  const file = join(dataDir, 'nube.db');
  if (!existsSync(file)) return ok(`SQLite ${file} is created at first start`);
  let db: Database.Database | undefined;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
    db.pragma('busy_timeout = 5000');
    const table = db.prepare("select 1 from sqlite_master where type = 'table' and name = 'nube_migrations'").get();
    const applied = table ? (db.prepare('select name from nube_migrations').all() as { name: string }[]).map((r) => r.name) : [];
    return migrationState(`SQLite ${file}`, applied, known);
  } catch (e) {
    return fail(`SQLite ${file} cannot be read: ${errorText(e)}`, 'restore it from a backup, or move it away so nube starts a new one');
  } finally {
    db?.close();
  }
}

async function postgres(url: string, known: string[]): Promise<CheckResult> {
  const where = `PostgreSQL ${redactUrl(url)}`;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (e) {
    return postgresFailure(where, url, e);
  }
  try {
    const version = (await client.query<{ v: string }>("select current_setting('server_version') as v")).rows[0]?.v;
    const exists = (await client.query<{ t: string | null }>("select to_regclass('nube_migrations') as t")).rows[0]?.t;
    const applied = exists ? (await client.query<{ name: string }>('select name from nube_migrations')).rows.map((r) => r.name) : [];
    return migrationState(`${where} (server ${version})`, applied, known);
  } catch (e) {
    return fail(`${where}: ${errorText(e)}`, 'check that the DATABASE_URL user may read this database');
  } finally {
    await client.end().catch(() => {});
  }
}

function postgresFailure(where: string, url: string, e: unknown): CheckResult {
  const code = (e as { code?: string }).code;
  const u = new URL(url);
  const host = `${u.hostname}:${u.port || 5432}`;
  switch (code) {
    case 'ECONNREFUSED':
      return fail(`${where}: nothing listens at ${host}`, 'start PostgreSQL there, or set DATABASE_URL to a running server');
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return fail(`${where}: host ${u.hostname} does not resolve`, 'correct the host in DATABASE_URL');
    case '28P01':
    case '28000':
      return fail(`${where}: the server refused the credentials (${errorText(e)})`, 'correct user and password in DATABASE_URL, or allow them in pg_hba.conf');
    case '3D000':
      return fail(`${where}: database ${u.pathname.slice(1)} does not exist`, `create it (createdb ${u.pathname.slice(1)}), then start nube`);
    default:
      return fail(`${where}: cannot connect (${errorText(e)})`, `check that PostgreSQL at ${host} is reachable from this host and DATABASE_URL is right`);
  }
}

async function redis(url: string): Promise<CheckResult> {
  const where = `Redis ${redactUrl(url)}`;
  const r = new Redis(url, { lazyConnect: true, connectTimeout: 5000, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
  // ioredis rejects connect() with "Connection is closed."; the reason comes as an 'error' event.
  let reason: unknown;
  r.on('error', (e: unknown) => {
    reason ??= e;
  });
  try {
    await r.connect();
    const info = await r.info('server');
    const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown version';
    return ok(`${where}: reachable (server ${version})`);
  } catch (e) {
    const text = errorText(reason ?? e);
    if (/NOAUTH|WRONGPASS|invalid password/i.test(text)) return fail(`${where}: ${text}`, 'correct the password in REDIS_URL');
    return fail(`${where}: cannot connect (${text})`, 'start Redis there, or set REDIS_URL to a running server');
  } finally {
    r.disconnect();
  }
}
