import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedDatabaseEngine } from './embedded-engine.js';
import { DatabaseEngineError } from './errors.js';

let dir: string;
let outside: string;
let engine: EmbeddedDatabaseEngine;
beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'nube-hostile-'));
  outside = mkdtempSync(path.join(tmpdir(), 'nube-outside-'));
  engine = new EmbeddedDatabaseEngine({ dir, workers: 2 });
  await engine.create('h');
  await engine.query('h', { sql: 'CREATE TABLE t(x)' });
});
afterAll(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

async function refused(sql: string): Promise<DatabaseEngineError> {
  const err = await engine.query('h', { sql }).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, sql).toBeInstanceOf(DatabaseEngineError);
  return err as DatabaseEngineError;
}

describe('hostile SQL is refused inside SQLite', () => {
  it('refuses ATTACH, DETACH and VACUUM INTO, creating no file', async () => {
    const target = path.join(outside, 'x.db');
    for (const sql of [
      `ATTACH '${target}' AS x`,
      `ATTACH 'file:${target}?mode=rwc' AS x`,
      "ATTACH ':memory:' AS m",
      'DETACH main',
      `VACUUM INTO '${target}'`,
      `VACUUM main INTO '${target}'`,
      `CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END; INSERT INTO t VALUES (1); ATTACH '${target}' AS y`,
    ]) {
      const e = await refused(sql);
      expect(e.code, sql).toBe('SQLITE_AUTH');
    }
    expect(readdirSync(outside)).toEqual([]);
    // The failing multi-statement text above rolled back as a whole.
    expect(
      (await engine.query('h', { sql: "SELECT count(*) FROM sqlite_schema WHERE name = 'tr'" })).rows,
    ).toEqual([[0]]);
  });

  it('refuses load_extension and fts3_tokenizer', async () => {
    expect((await refused("SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')")).message).toMatch(
      /not authorized/,
    );
    expect((await refused("SELECT fts3_tokenizer('simple')")).code).toMatch(/^SQLITE_/);
  });

  it('refuses pragmas that change files or safety, allows read-only ones', async () => {
    for (const sql of [
      'PRAGMA journal_mode=DELETE',
      'PRAGMA journal_mode=OFF',
      'PRAGMA synchronous=OFF',
      'PRAGMA writable_schema=ON',
      'PRAGMA max_page_count=1000000000',
      'PRAGMA temp.max_page_count=1000000000',
      "PRAGMA temp_store_directory='/tmp'",
      'PRAGMA mmap_size=1000000000',
      'PRAGMA cache_size=-10000000',
      'PRAGMA locking_mode=EXCLUSIVE',
      'PRAGMA trusted_schema=ON',
      'PRAGMA cell_size_check=OFF',
      'PRAGMA database_list',
      'PRAGMA wal_checkpoint(TRUNCATE)',
      'PRAGMA schema_version=1',
    ]) {
      expect((await refused(sql)).code, sql).toBe('SQLITE_AUTH');
    }
    // The table-valued form is refused too (SQLite reports it as SQLITE_ERROR from xConnect).
    expect((await refused('SELECT * FROM pragma_database_list')).message).toMatch(
      /^not authorized: PRAGMA database_list is not allowed/,
    );
    expect((await engine.query('h', { sql: 'PRAGMA table_info(t)' })).rows[0]).toEqual([
      0,
      'x',
      '',
      0,
      null,
      0,
    ]);
    expect((await engine.query('h', { sql: "SELECT name FROM pragma_table_info('t')" })).rows).toEqual([
      ['x'],
    ]);
    expect((await engine.query('h', { sql: 'PRAGMA journal_mode' })).rows).toEqual([['wal']]);
    await engine.query('h', { sql: 'PRAGMA user_version=7' });
    expect((await engine.query('h', { sql: 'PRAGMA user_version' })).rows).toEqual([[7]]);
  });

  it('refuses user transaction control (batch is the transaction)', async () => {
    for (const sql of ['BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT a', 'RELEASE a', 'BEGIN IMMEDIATE']) {
      expect((await refused(sql)).code, sql).toBe('SQLITE_AUTH');
    }
  });

  it('keeps defensive mode: no writes to the schema or raw pages', async () => {
    expect((await refused("UPDATE sqlite_schema SET sql = 'x'")).code).toMatch(/^SQLITE_/);
    expect((await refused('CREATE VIRTUAL TABLE v USING sqlite_dbpage')).code).toBe('SQLITE_AUTH');
    await engine.query('h', { sql: 'CREATE VIRTUAL TABLE f USING fts5(body)' });
  });

  it('the database file stays in WAL mode with the engine settings', async () => {
    expect(existsSync(path.join(dir, 'h.sqlite-wal'))).toBe(true);
  });
});
