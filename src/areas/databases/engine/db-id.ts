import path from 'node:path';
import { DatabaseEngineError } from './errors.js';

/**
 * Database ids become file names, so only a conservative alphabet passes: no dots,
 * no slashes, no NUL, bounded length. That alone rules out path traversal; `dbFile`
 * also checks the resolved path stays inside the directory.
 */
const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

export function assertDbId(id: unknown): asserts id is string {
  if (typeof id !== 'string' || !ID.test(id)) {
    throw new DatabaseEngineError(
      'InvalidDatabaseId',
      'database id must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$',
    );
  }
}

export function dbFile(dir: string, id: string): string {
  assertDbId(id);
  const root = path.resolve(dir);
  const file = path.resolve(root, `${id}.sqlite`);
  if (path.dirname(file) !== root)
    throw new DatabaseEngineError('InvalidDatabaseId', 'database id escapes directory');
  return file;
}

/** Every file SQLite may keep for a database. */
export function dbFiles(dir: string, id: string): string[] {
  const f = dbFile(dir, id);
  return [f, `${f}-wal`, `${f}-shm`, `${f}-journal`];
}
