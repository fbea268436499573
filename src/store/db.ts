import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { Tables } from './schema.js';

export type Dialect = 'sqlite' | 'postgres';

export interface Store {
  db: Kysely<Tables>;
  dialect: Dialect;
  close(): Promise<void>;
}

// int8 (COUNT, bigint columns holding epoch milliseconds) as numbers: every such value here is < 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

export interface StoreOptions {
  databaseUrl?: string;
  /** Directory of the embedded SQLite file (ignored with databaseUrl). */
  dataDir: string;
  /** SQLite file name; ':memory:' for throwaway stores. */
  file?: string;
}

export function openStore(opts: StoreOptions): Store {
  if (opts.databaseUrl) {
    const pool = new pg.Pool({ connectionString: opts.databaseUrl, max: 10 });
    const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
    return { db, dialect: 'postgres', close: () => db.destroy() };
  }
  const file = opts.file ?? 'nube.db';
  if (file !== ':memory:') mkdirSync(opts.dataDir, { recursive: true });
  const sqlite = new Database(file === ':memory:' ? file : join(opts.dataDir, file));
  // busy_timeout first so the pragmas below wait rather than fail under a concurrent writer.
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('journal_mode = WAL');
  // NORMAL in WAL mode can lose the last transactions on power loss, not on a process crash; metadata
  // writes that must survive power loss too are few, so FULL is chosen for durability over speed.
  sqlite.pragma('synchronous = FULL');
  sqlite.pragma('foreign_keys = ON');
  const db = new Kysely<Tables>({ dialect: new SqliteDialect({ database: sqlite }) });
  return { db, dialect: 'sqlite', close: () => db.destroy() };
}
