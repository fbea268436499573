// Issue 37 item 1: the whole drill. An installation gets one of each kind of resource, is backed up
// with `nube backup` while it runs (and while a database is being written), stops, loses its data dir
// (and its PostgreSQL database), is restored with `nube restore` into a new data dir (and a new empty
// database), starts, and every resource answers as before. Then the refusals: a non-empty data dir, a
// corrupted file, a backup from a newer nube, an interrupted backup; and the S3 target.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startS3rver } from '../../src/blob/s3rver-harness.js';
import { makeKept } from '../helpers/kept-resources.js';
import { type NubeProcess, nubeProcess } from '../helpers/nube-process.js';
import { createTempDatabase, DIALECTS, type DialectName } from '../helpers/pg.js';
import { exited, freePort, nubeEntry, spawnNube } from '../helpers/process.js';
import { callJson } from '../helpers/server.js';
import { TEST_ROOT } from '../sandboxes/helpers.js';

const run = promisify(execFile);
const ENV = { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_SANDBOX_STORE: 'copy', NUBE_SANDBOX_POOL: '0', NUBE_SSH_PORT: '0', NUBE_BOX_API_PORT: '0' };

/** `nube <args>` with only `env` as its configuration; resolves with its exit code and output. */
async function cli(env: Record<string, string | undefined>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [...nubeEntry(), ...args], {
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NUBE_LOG_LEVEL: 'silent', ...env } as NodeJS.ProcessEnv,
      maxBuffer: 16 * 2 ** 20,
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: x.code ?? -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

interface Hooks {
  base: string;
  got: { headers: IncomingHttpHeaders; body: string }[];
  close(): Promise<void>;
}
async function hookReceiver(): Promise<Hooks> {
  const got: Hooks['got'] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end('ok');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  return { base: `http://127.0.0.1:${port}`, got, close: () => new Promise((r) => server.close(() => r())) };
}

const empty = (dir: string) => !existsSync(dir) || readdirSync(dir).length === 0;
const manifestOf = (dir: string) => JSON.parse(readFileSync(`${dir}/manifest.json`, 'utf8'));

describe.each(DIALECTS)('%s: backup while running, restore onto a new data dir, every resource answers as before', (dialect: DialectName) => {
  let n: NubeProcess;
  let hooks: Hooks;
  const root = `${TEST_ROOT}/backup-${dialect}-${process.pid}`;
  let restored: ChildProcess | undefined;
  let dropRestored: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    rmSync(root, { recursive: true, force: true });
    hooks = await hookReceiver();
    n = await nubeProcess(dialect, `${root}/data`, ENV);
    await n.start();
  }, 600_000);

  afterAll(async () => {
    if (restored) {
      restored.kill('SIGTERM');
      await exited(restored);
    }
    await dropRestored?.();
    await n?.close();
    await hooks?.close();
    rmSync(root, { recursive: true, force: true });
  }, 180_000);

  // Not retried: a second try would find the first one's resources (and a stopped nube).
  it('keys, files, databases (written during the backup), webhooks, documents', { retry: 0, timeout: 900_000 }, async () => {
    const { key, created, db, hook, doc } = await makeKept(n, 'kept', `${hooks.base}/hook`);
    const docId = doc.body.document?.id ?? doc.body.id;

    // The backup runs while a client keeps writing the database: every row acknowledged before the
    // backup started is in it, and the copy is one consistent state (SQLite's backup API).
    let writing = true;
    let acked = 0;
    const writer = (async () => {
      while (writing) {
        const r = await n.call('POST', `/databases/${db.body.id}/query`, { sql: 'insert into t values (?)', args: [`w${acked}`] });
        if (r.status !== 200) throw new Error(`a write failed: ${JSON.stringify(r.body)}`);
        acked++;
      }
    })();
    while (acked < 5) await Promise.race([writer, new Promise((r) => setTimeout(r, 20))]);
    const ackedBefore = acked;
    const backupDir = `${root}/backup`;
    const env = { NUBE_DATA_DIR: n.dataDir, ...(n.databaseUrl ? { DATABASE_URL: n.databaseUrl } : {}) };
    const b = await cli(env, 'backup', '--to', backupDir);
    writing = false;
    await writer;
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toContain('metadata store');
    expect(b.stdout).toMatch(/databases: 2 file\(s\)/); // the database and the usage meters
    expect(b.stdout).toMatch(/complete: \d+ files/);
    // The secret and every account's data: readable by the backup's owner only.
    expect(statSync(backupDir).mode & 0o777).toBe(0o700);
    const manifest = manifestOf(backupDir);
    expect(manifest.metadata.dialect).toBe(dialect);
    expect(manifest.migrations.length).toBeGreaterThan(50);
    expect(manifest.files.every((f: { sha256: string }) => /^[0-9a-f]{64}$/.test(f.sha256))).toBe(true);

    // The machine is lost: nube stops, its data dir and its database are gone.
    await n.stop('SIGTERM');
    rmSync(n.dataDir, { recursive: true, force: true });
    const target = `${root}/restored`;
    const pg = dialect === 'postgres' ? await createTempDatabase('restore') : undefined;
    dropRestored = pg?.drop;
    const renv: Record<string, string> = { NUBE_DATA_DIR: target, ...(pg ? { DATABASE_URL: pg.url } : {}) };

    // Another data dir is another node id: refused, saying how to keep the node's identity; nothing written.
    const other = await cli(renv, 'restore', '--from', backupDir);
    expect(other.code).toBe(1);
    expect(other.stderr).toContain(`NUBE_NODE_ID=${manifest.node}`);
    expect(empty(target)).toBe(true);

    renv.NUBE_NODE_ID = manifest.node;
    const r = await cli(renv, 'restore', '--from', backupDir);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`restored into ${target}`);

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    restored = await spawnNube(
      { ...ENV, ...renv, NUBE_PORT: String(port), NUBE_HOST: '127.0.0.1', NUBE_LOG_LEVEL: 'silent', NUBE_JOB_POLL_MS: '50' },
      base,
      { startMs: 300_000 },
    );
    const call = (method: string, path: string, body?: unknown, k = n.ownerKey) => callJson(base, method, path, body, { authorization: `Bearer ${k}` });

    expect((await call('GET', '/account')).status).toBe(200);
    expect((await call('GET', '/account', undefined, key.body.secret)).status).toBe(200);
    const file = await call('GET', `/files/${created.body.file.id}`);
    expect(file.body.status).toBe('DONE');
    expect(await (await fetch(file.body.readUrl)).text()).toBe('kept');
    const rows = await call('POST', `/databases/${db.body.id}/query`, { sql: 'select v from t' });
    expect(rows.status, JSON.stringify(rows.body)).toBe(200);
    const values = JSON.stringify(rows.body.rows);
    expect(values).toContain('before');
    for (let i = 0; i < ackedBefore; i++) expect(values).toContain(`"w${i}"`);
    // The database takes writes again.
    expect((await call('POST', `/databases/${db.body.id}/query`, { sql: "insert into t values ('after')" })).status).toBe(200);
    expect((await call('GET', `/webhooks/${hook.body.id}`)).status).toBe(200);
    expect((await call('GET', `/documents/${docId}`)).status).toBe(200);

    // The restored webhook still fires, signed with the secret it was made with.
    const before = hooks.got.length;
    const another = await call('POST', '/files', { fileName: 'after.txt', contentType: 'text/plain', size: 5 });
    expect(another.status).toBe(201);
    expect((await fetch(another.body.putUrl, { method: 'PUT', body: 'after', headers: { 'content-type': 'text/plain' } })).ok).toBe(true);
    const end = Date.now() + 60_000;
    while (!hooks.got.slice(before).some((h) => h.body.includes(another.body.file.id)) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    expect(hooks.got.slice(before).some((h) => h.body.includes(another.body.file.id))).toBe(true);
  });
});

describe('restore refuses what it cannot restore whole, writing nothing', () => {
  let n: NubeProcess;
  const root = `${TEST_ROOT}/backup-refusals-${process.pid}`;
  const good = `${root}/good`;
  let env: Record<string, string>;

  beforeAll(async () => {
    rmSync(root, { recursive: true, force: true });
    n = await nubeProcess('sqlite', `${root}/data`, ENV);
    await n.start();
    const db = await n.call('POST', '/databases', { name: 'x' });
    await n.call('POST', `/databases/${db.body.id}/query`, { statements: [{ sql: 'create table t (v)' }, { sql: 'insert into t values (1)' }] });
    // Enough files that a backup takes a moment (the interruption test kills one mid-way).
    for (let i = 0; i < 40; i++) {
      const f = await n.call('POST', '/files', { fileName: `f${i}.txt`, contentType: 'text/plain', size: 3 });
      await fetch(f.body.putUrl, { method: 'PUT', body: 'abc', headers: { 'content-type': 'text/plain' } });
    }
    env = { NUBE_DATA_DIR: n.dataDir };
    const b = await cli(env, 'backup', '--to', good);
    expect(b.code, b.stderr).toBe(0);
  }, 600_000);

  afterAll(async () => {
    await n?.close();
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  const restoreEnv = (dir: string) => ({ NUBE_DATA_DIR: dir, NUBE_NODE_ID: manifestOf(good).node });

  it('a data dir that is not empty', { timeout: 120_000 }, async () => {
    const dir = `${root}/busy`;
    mkdirSync(dir, { recursive: true });
    writeFileSync(`${dir}/something.txt`, 'mine');
    const r = await cli(restoreEnv(dir), 'restore', '--from', good);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('is not empty (something.txt)');
    expect(readdirSync(dir)).toEqual(['something.txt']);
    // Nor does a backup go into a directory that already holds one.
    const again = await cli(env, 'backup', '--to', good);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('holds a backup');
  });

  it('a corrupted file: detected by its checksum before anything is written', { timeout: 120_000 }, async () => {
    const bad = `${root}/corrupt`;
    await run('cp', ['-a', good, bad]);
    const m = manifestOf(bad);
    const victim = m.files.find((f: { path: string }) => f.path.startsWith('databases/'));
    const bytes = readFileSync(`${bad}/${victim.path}`);
    bytes[bytes.length - 1] ^= 0xff;
    writeFileSync(`${bad}/${victim.path}`, bytes);
    const dir = `${root}/from-corrupt`;
    const r = await cli(restoreEnv(dir), 'restore', '--from', bad);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${victim.path} does not match its checksum; nothing was restored`);
    expect(empty(dir)).toBe(true);
  });

  it('a backup from a newer nube (a migration this one does not know)', { timeout: 120_000 }, async () => {
    const newer = `${root}/newer`;
    await run('cp', ['-a', good, newer]);
    const m = manifestOf(newer);
    m.migrations.push('9999-platform-from-the-future');
    writeFileSync(`${newer}/manifest.json`, JSON.stringify(m));
    const dir = `${root}/from-newer`;
    const r = await cli(restoreEnv(dir), 'restore', '--from', newer);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('migrated by a newer nube');
    expect(r.stderr).toContain('9999-platform-from-the-future');
    expect(empty(dir)).toBe(true);
  });

  it('an interrupted backup (killed mid-way) has no manifest and is refused as incomplete', { timeout: 300_000 }, async () => {
    const cut = `${root}/cut`;
    const child = spawn(process.execPath, [...nubeEntry(), 'backup', '--to', cut], {
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NUBE_LOG_LEVEL: 'silent', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Killed as soon as it says it copied the metadata store: the blobs are still to come.
    await new Promise<void>((resolve) => {
      let out = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        if (out.includes('metadata store')) resolve();
      });
    });
    child.kill('SIGKILL');
    await exited(child);
    expect(existsSync(cut)).toBe(true);
    expect(existsSync(`${cut}/manifest.json`)).toBe(false);
    const dir = `${root}/from-cut`;
    const r = await cli(restoreEnv(dir), 'restore', '--from', cut);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('interrupted before it completed');
    expect(empty(dir)).toBe(true);
    // And a second backup will not write into the interrupted one's directory.
    const again = await cli(env, 'backup', '--to', cut);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('an interrupted backup?');
  });

  it('to and from S3 (s3rver): the manifest is uploaded last; the restore checks and writes the same', { timeout: 300_000 }, async () => {
    mkdirSync(`${root}/s3`, { recursive: true });
    const s3 = await startS3rver(`${root}/s3`, ['backups']);
    try {
      const s3env = {
        NUBE_S3_ENDPOINT: s3.endpoint,
        NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
        NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      };
      const b = await cli({ ...env, ...s3env }, 'backup', '--to', 's3://backups/nightly/1');
      expect(b.code, b.stderr).toBe(0);
      expect(b.stdout).toMatch(/uploaded \d+\/\d+/);
      const dir = `${root}/from-s3`;
      const r = await cli({ ...restoreEnv(dir), ...s3env }, 'restore', '--from', 's3://backups/nightly/1');
      expect(r.code, r.stderr).toBe(0);
      const local = manifestOf(good);
      const names = readdirSync(`${dir}/databases`).filter((f) => f.endsWith('.sqlite'));
      expect(names.length).toBe(local.files.filter((f: { path: string }) => /^databases\/[^/]+\.sqlite$/.test(f.path)).length);
      expect(existsSync(`${dir}/nube.db`)).toBe(true);
      expect(readFileSync(`${dir}/secret.key`, 'utf8')).toBe(readFileSync(`${n.dataDir}/secret.key`, 'utf8'));
      // A prefix with no manifest is no backup.
      const none = await cli({ ...restoreEnv(`${root}/from-none`), ...s3env }, 'restore', '--from', 's3://backups/nothing-here');
      expect(none.code).toBe(1);
      expect(none.stderr).toContain('holds no manifest.json');
    } finally {
      await s3.stop();
    }
  });
});
