// What an installation's backup is made of. Each area names the directories it owns on disk (its
// `backup` hook in areas/area.ts); the platform copies them without knowing what they hold. The
// metadata store and the secret are the platform's own parts (store/backup.ts, take.ts).

/** One directory an area owns, copied into the backup under `name` and back to `dir` on restore. */
export interface BackupPart {
  /** Its directory's name in the backup: unique among parts, stable across versions. */
  name: string;
  /** Where it lives on this host (may not exist yet: nothing to copy). */
  dir: string;
  /**
   * Files (paths relative to `dir`, `/`-separated) that are SQLite databases some process may be
   * writing: copied with SQLite's online backup API, so each copy is one consistent state. Their
   * `-wal`, `-shm` and `-journal` companions are left out (the copy already holds their content).
   */
  sqlite?: RegExp;
  /** Relative paths left out: staging, temp files, caches. A directory that matches is not entered. */
  skip?: RegExp;
  /**
   * A part the area copies itself rather than file by file (the sandboxes' store: a consistent copy
   * taken while each sandbox is frozen for an instant, archived with its owners and xattrs). `take`
   * writes the part's files into `into` (its directory in the backup), `put` puts them back from
   * `from` at restore, once every check has passed.
   */
  own?: {
    take(into: string, progress: (line: string) => void): Promise<void>;
    put(from: string, progress: (line: string) => void): Promise<void>;
  };
}

/** The name a part of the platform's own has in a backup. */
export const METADATA_PART = 'metadata';
export const SECRET_PART = 'secret';
