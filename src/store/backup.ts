// The metadata store's part of a backup: SQLite's online backup API on the embedded file, `pg_dump`
// (one snapshot) on PostgreSQL; and back: the file put in place, or the dump loaded with `psql` into
// an empty database, in one transaction.
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import { copyPlain, copySqlite } from '../platform/backup/copy.js';

const run = promisify(execFile);
const SQLITE_FILE = 'nube.db';
const MIGRATIONS = 'nube_migrations';

export interface MetadataTarget {
  databaseUrl?: string;
  dataDir: string;
}

export interface MetadataCopy {
  dialect: 'sqlite' | 'postgres';
  /** Relative to the backup's directory. */
  file: string;
  migrations: string[];
}

function missingTool(tool: string, e: unknown): Error {
  if ((e as NodeJS.ErrnoException).code === 'ENOENT')
    return new Error(`${tool} is not installed: it is needed for a metadata store on PostgreSQL (Debian: apt-get install postgresql-client)`);
  const stderr = (e as { stderr?: string }).stderr?.trim();
  return new Error(`${tool} failed: ${stderr || String(e)}`);
}

/** Copies the metadata store into `backupDir/<part>/`. */
export async function backupMetadata(t: MetadataTarget, backupDir: string, part: string): Promise<MetadataCopy> {
  if (!t.databaseUrl) {
    const file = `${part}/${SQLITE_FILE}`;
    await copySqlite(join(t.dataDir, SQLITE_FILE), join(backupDir, file));
    const copy = new Database(join(backupDir, file), { readonly: true });
    try {
      const rows = copy.prepare(`select name from ${MIGRATIONS} order by name`).all() as { name: string }[];
      return { dialect: 'sqlite', file, migrations: rows.map((r) => r.name) };
    } finally {
      copy.close();
    }
  }
  const file = `${part}/postgres.sql`;
  await mkdir(join(backupDir, part), { recursive: true });
  // Migrations change only when a nube starts on the store, not while it runs: read beside the dump.
  const client = new pg.Client({ connectionString: t.databaseUrl });
  await client.connect();
  let migrations: string[];
  try {
    migrations = (await client.query<{ name: string }>(`select name from ${MIGRATIONS} order by name`)).rows.map((r) => r.name);
  } finally {
    await client.end();
  }
  try {
    await run('pg_dump', ['--no-owner', '--no-privileges', '--format=plain', '--file', join(backupDir, file), '--dbname', t.databaseUrl], {
      maxBuffer: 16 * 2 ** 20,
    });
  } catch (e) {
    throw missingTool('pg_dump', e);
  }
  return { dialect: 'postgres', file, migrations };
}

/** Why the metadata store cannot receive this backup, or null. Writes nothing. */
export async function metadataRefusal(t: MetadataTarget, dialect: MetadataCopy['dialect']): Promise<string | null> {
  if (dialect === 'sqlite' && t.databaseUrl)
    return 'the backup holds an embedded SQLite metadata store, but DATABASE_URL is set: restore without DATABASE_URL';
  if (dialect === 'postgres' && !t.databaseUrl)
    return 'the backup holds a PostgreSQL metadata store: set DATABASE_URL to an empty database to restore it into';
  if (!t.databaseUrl) return null;
  try {
    await run('psql', ['--version']);
  } catch (e) {
    return missingTool('psql', e).message;
  }
  const client = new pg.Client({ connectionString: t.databaseUrl });
  await client.connect();
  try {
    const r = await client.query<{ n: string }>(
      "select count(*) as n from information_schema.tables where table_schema not in ('pg_catalog', 'information_schema')",
    );
    const n = Number(r.rows[0]?.n ?? 0);
    return n ? `DATABASE_URL's database is not empty (${n} table(s)): restore into a new, empty database` : null;
  } finally {
    await client.end();
  }
}

/** Puts the metadata copy in place (after metadataRefusal said nothing). */
export async function restoreMetadata(t: MetadataTarget, copy: Pick<MetadataCopy, 'dialect' | 'file'>, backupDir: string): Promise<void> {
  const src = join(backupDir, copy.file);
  if (copy.dialect === 'sqlite') return copyPlain(src, join(t.dataDir, SQLITE_FILE));
  try {
    await run('psql', ['-v', 'ON_ERROR_STOP=1', '--single-transaction', '--quiet', '--file', src, '--dbname', t.databaseUrl!], {
      maxBuffer: 64 * 2 ** 20,
    });
  } catch (e) {
    throw missingTool('psql', e);
  }
}
