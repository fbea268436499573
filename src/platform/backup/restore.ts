// `nube restore`: every check before any write. The backup must be complete (its manifest), made by a
// nube whose migrations this one knows, whole (every file's SHA-256), for this node id and secret; the
// data dir (and each area directory) must be empty, the PostgreSQL database too. Only then are files
// written, the metadata store last; a failure while writing removes what was written.
import { readdir, rm } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { copyPlain } from './copy.js';
import { type BackupManifest, parseManifest, secretCheck, sha256File } from './manifest.js';
import type { BackupPart } from './parts.js';
import type { BackupReader } from './target.js';

export interface RestoreInput {
  reader: BackupReader;
  dataDir: string;
  /** This nube's node id (config.nodes.id) and whether the operator set it (NUBE_NODE_ID). */
  node: string;
  /** The secret given as NUBE_SECRET, or null (the backup's secret file is restored). */
  givenSecret: string | null;
  /** Every migration this nube has. */
  migrations: string[];
  /** The refusal for a store a newer nube migrated (store/migrate.ts NewerStoreError). */
  newer(unknown: string[]): Error;
  /** Why the metadata store cannot take the backup, or null (store/backup.ts). */
  metadataRefusal(dialect: BackupManifest['metadata']['dialect']): Promise<string | null>;
  restoreMetadata(m: BackupManifest['metadata'], dir: string): Promise<void>;
  parts: BackupPart[];
  progress(line: string): void;
}

export class RestoreRefused extends Error {}

async function entries(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

export async function restoreBackup(o: RestoreInput): Promise<BackupManifest> {
  const m = parseManifest(await o.reader.manifest());
  o.progress(`backup of nube ${m.version} taken ${m.createdAt} (${m.files.length} files, metadata on ${m.metadata.dialect})`);

  const known = new Set(o.migrations);
  const unknown = m.migrations.filter((n) => !known.has(n));
  if (unknown.length) throw o.newer(unknown);
  const byName = new Map(o.parts.map((p) => [p.name, p]));
  const strange = m.parts.filter((n) => !byName.has(n));
  if (strange.length) throw new RestoreRefused(`the backup has parts this nube does not know (${strange.join(', ')}): restore it with the nube that made it`);

  const dataDir = resolve(o.dataDir);
  const present = await entries(dataDir);
  if (present.length)
    throw new RestoreRefused(
      `the data dir ${dataDir} is not empty (${present.slice(0, 3).join(', ')}${present.length > 3 ? ', ...' : ''}): a restore never mixes with an installation; give an empty or new NUBE_DATA_DIR`,
    );
  // An area directory configured outside the data dir (NUBE_BLOB_DIR, NUBE_TEMPLATES_DIR) must be empty too.
  for (const name of m.parts) {
    const dir = resolve(byName.get(name)!.dir);
    if (!relative(dataDir, dir).startsWith('..')) continue;
    const inside = await entries(dir);
    if (inside.length) throw new RestoreRefused(`${dir} (where ${name} goes) is not empty: empty it or point its setting elsewhere`);
  }
  if (m.node !== o.node)
    throw new RestoreRefused(
      `the backup is of node ${m.node}; this nube would run as node ${o.node}: set NUBE_NODE_ID=${m.node} in nube's environment (for restore and serve) so its databases, sandboxes and machines stay this node's`,
    );
  if (o.givenSecret !== null && secretCheck(o.givenSecret) !== m.secret.check)
    throw new RestoreRefused("NUBE_SECRET is not the secret the backup's keys and certificates were sealed with: set the installation's secret");
  if (o.givenSecret === null && m.secret.file === null)
    throw new RestoreRefused("the backup was taken with NUBE_SECRET set and holds no secret: set NUBE_SECRET to the installation's secret");
  const refusal = await o.metadataRefusal(m.metadata.dialect);
  if (refusal) throw new RestoreRefused(refusal);

  const paths = m.files.map((f) => f.path);
  const src = await o.reader.fetch(paths, o.progress);
  o.progress(`checking ${m.files.length} files against the manifest's checksums`);
  for (const f of m.files) {
    const got = await sha256File(join(src, f.path)).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') throw new RestoreRefused(`the backup is damaged: ${f.path} is missing; nothing was restored`);
      throw e;
    });
    if (got.sha256 !== f.sha256 || got.size !== f.size)
      throw new RestoreRefused(`the backup is damaged: ${f.path} does not match its checksum; nothing was restored`);
  }

  const written = new Set<string>([dataDir]);
  try {
    for (const name of m.parts) {
      const part = byName.get(name)!;
      const mine = m.files.filter((f) => f.path.startsWith(`${name}/`));
      written.add(resolve(part.dir));
      if (part.own) await part.own.put(join(src, name), (line) => o.progress(`${name}: ${line}`));
      else for (const f of mine) await copyPlain(join(src, f.path), join(part.dir, f.path.slice(name.length + 1)));
      o.progress(`${name}: ${mine.length} file(s)`);
    }
    if (m.secret.file && o.givenSecret === null) await copyPlain(join(src, m.secret.file), join(dataDir, 'secret.key'));
    await o.restoreMetadata(m.metadata, src);
    o.progress(`metadata store (${m.metadata.dialect}, ${m.migrations.length} migrations)`);
  } catch (e) {
    for (const dir of written) await rm(dir, { recursive: true, force: true });
    throw e;
  }
  o.progress(`restored into ${dataDir}: start nube (nube serve) on it`);
  return m;
}

