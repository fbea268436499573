import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { Tables } from './schema.js';
import { storeTracing } from './traced.js';

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
  /** A span per statement (platform/tracing.ts); only when traces are configured: it costs a step per statement. */
  traced?: boolean;
  /** Told about errors of idle PostgreSQL connections (they are replaced, not fatal). */
  onIdleError?: (err: Error) => void;
}

export function openStore(opts: StoreOptions): Store {
  if (opts.databaseUrl) {
    const pool = new pg.Pool({ connectionString: opts.databaseUrl, max: 10 });
    // An idle pooled connection that the server drops (restart, failover, pg_terminate_backend) emits
    // 'error' on the pool; unhandled, that would crash nube. The pool replaces the connection on next use.
    pool.on('error', (err) => opts.onIdleError?.(err));
    const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }), plugins: opts.traced ? [storeTracing('postgresql')] : [] });
    return { db, dialect: 'postgres', close: () => db.destroy() };
  }
  const file = opts.file ?? 'nube.db';
  if (file !== ':memory:') mkdirSync(opts.dataDir, { recursive: true });
  const sqlite = new Database(file === ':memory:' ? file : join(opts.dataDir, file));
  // busy_timeout first so the pragmas below wait rather than fail under a concurrent writer.
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('journal_mode = WAL');
  // NORMAL in WAL mode (the pocketbase setting ARCHITECTURE.md names): a commit is in the WAL when it
  // returns, so a crash or kill of nube loses nothing; only an OS crash or power loss can lose the last
  // few commits. FULL costs an fsync per commit (about 5 ms on this disk), which capped webhook
  // deliveries and job throughput at a few hundred per second. Operators who need power-loss
  // durability for metadata run it on PostgreSQL.
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  const db = new Kysely<Tables>({ dialect: new SqliteDialect({ database: cachingStatements(sqlite) }), plugins: opts.traced ? [storeTracing('sqlite')] : [] });
  return { db, dialect: 'sqlite', close: () => db.destroy() };
}

/** Most statements nube runs, one per SQL text, kept prepared (better-sqlite3's prepare is a compile). */
const STATEMENT_CACHE = 500;

/**
 * The database as Kysely's SQLite driver sees it, with prepare() answered from a cache by SQL text: a
 * prepare compiles the statement (for `select *` from a wide table, most of a primary-key lookup's
 * cost), and Kysely calls it for every query. SQLite recompiles a kept statement itself when the
 * schema changed. One connection runs one statement at a time, so a kept one is never in use twice
 * (a busy one, which only a stream could leave, is replaced anyway); past the cap the least recently
 * used goes.
 */
function cachingStatements(sqlite: Database.Database) {
  const cache = new Map<string, Database.Statement>();
  return {
    prepare(sql: string) {
      const hit = cache.get(sql);
      if (hit && !hit.busy) {
        cache.delete(sql);
        cache.set(sql, hit);
        return hit;
      }
      const stmt = sqlite.prepare(sql);
      cache.set(sql, stmt);
      if (cache.size > STATEMENT_CACHE) cache.delete(cache.keys().next().value!);
      return stmt;
    },
    close() {
      cache.clear();
      sqlite.close();
    },
  };
}
