// Copying what a running nube writes: SQLite files through SQLite's online backup API (one consistent
// state even while another process commits), other files as they are.
import { copyFile, mkdir, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';

/** A consistent copy of a SQLite database some other process may be writing. */
export async function copySqlite(src: string, dest: string): Promise<void> {
  await mkdir(dirname(dest), { recursive: true });
  const db = new Database(src, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    await db.backup(dest);
  } finally {
    db.close();
  }
  // The copy is a plain rollback-journal file: no -wal beside it to lose or to forget.
  const copy = new Database(dest);
  try {
    copy.pragma('journal_mode = DELETE');
  } finally {
    copy.close();
  }
}

export async function copyPlain(src: string, dest: string): Promise<void> {
  await mkdir(dirname(dest), { recursive: true });
  await copyFile(src, dest);
}

const SQLITE_COMPANION = /-(wal|shm|journal)$/;

/**
 * Regular files below `dir` (relative, `/`-separated), sorted, leaving out what `skip` matches and,
 * when `sqlite` is given, the companions of the databases it matches. A missing `dir` has none.
 */
export async function listFiles(dir: string, skip?: RegExp, sqlite?: RegExp): Promise<string[]> {
  const out: string[] = [];
  const walk = async (rel: string) => {
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(rel ? join(dir, rel) : dir, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    for (const e of entries) {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (skip?.test(path)) continue;
      if (e.isDirectory()) await walk(path);
      else if (e.isFile() && !(sqlite && SQLITE_COMPANION.test(path) && sqlite.test(path.replace(SQLITE_COMPANION, '')))) out.push(path);
    }
  };
  await walk('');
  return out.sort();
}
