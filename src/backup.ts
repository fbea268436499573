// `nube backup` and `nube restore`: the platform's copier (platform/backup/) given the metadata store
// (store/backup.ts) and the directories each area says it owns (AreaModule.backup).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { AREAS } from './areas/index.js';
import type { Config } from './config.js';
import { ALL_MIGRATIONS } from './migrations.js';
import type { BackupManifest } from './platform/backup/manifest.js';
import type { BackupPart } from './platform/backup/parts.js';
import { restoreBackup } from './platform/backup/restore.js';
import { takeBackup } from './platform/backup/take.js';
import { backupReader, backupWriter } from './platform/backup/target.js';
import { backupMetadata, metadataRefusal, restoreMetadata } from './store/backup.js';
import { NewerStoreError } from './store/migrate.js';
import { VERSION } from './version.js';

export function backupParts(config: Config): BackupPart[] {
  return AREAS.flatMap((a) => a.backup?.(config) ?? []);
}

export async function backup(config: Config, to: string, progress: (line: string) => void): Promise<BackupManifest> {
  const store = { databaseUrl: config.databaseUrl, dataDir: config.dataDir };
  if (!config.databaseUrl && !existsSync(join(config.dataDir, 'nube.db')))
    throw new Error(`${config.dataDir} holds no nube installation (no nube.db): check NUBE_DATA_DIR`);
  const secretFile = join(config.dataDir, 'secret.key');
  return takeBackup({
    version: VERSION,
    node: config.nodes.id,
    secret: config.secret,
    secretFile: existsSync(secretFile) ? secretFile : null,
    metadata: (dir, part) => backupMetadata(store, dir, part),
    parts: backupParts(config),
    writer: await backupWriter(config, to),
    progress,
  });
}

/** `givenSecret`: NUBE_SECRET when the operator set it (the config then holds it), else null. */
export async function restore(config: Config, givenSecret: string | null, from: string, progress: (line: string) => void): Promise<BackupManifest> {
  const store = { databaseUrl: config.databaseUrl, dataDir: config.dataDir };
  const reader = await backupReader(config, from);
  try {
    return await restoreBackup({
      reader,
      dataDir: config.dataDir,
      node: config.nodes.id,
      givenSecret,
      migrations: Object.keys(ALL_MIGRATIONS),
      newer: (unknown) => new NewerStoreError(unknown),
      metadataRefusal: (dialect) => metadataRefusal(store, dialect),
      restoreMetadata: (m, dir) => restoreMetadata(store, m, dir),
      parts: backupParts(config),
      progress,
    });
  } finally {
    await reader.close();
  }
}
