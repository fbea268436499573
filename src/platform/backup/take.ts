// `nube backup`: the metadata store first, then the secret, then each area's directories. That order
// makes the copy consistent where it matters: anything a metadata row points at (a file's blob, a
// database's file) existed before the row was copied, so it is in the backup too; what is created
// while the backup runs may be copied without its row, which is harmless.
import { join } from 'node:path';
import { copyPlain, copySqlite, listFiles } from './copy.js';
import { type BackupManifest, MANIFEST_FORMAT, type ManifestFile, secretCheck, sha256File } from './manifest.js';
import { type BackupPart, METADATA_PART, SECRET_PART } from './parts.js';
import type { BackupWriter } from './target.js';

export interface MetadataBackup {
  dialect: 'sqlite' | 'postgres';
  file: string;
  migrations: string[];
}

export interface BackupInput {
  version: string;
  /** This node's id (config.nodes.id), recorded for the restore. */
  node: string;
  secret: string;
  /** The secret's file (in the data dir), or null when the operator gives it as NUBE_SECRET. */
  secretFile: string | null;
  /** Copies the metadata store into `dir/<part>/` (store/backup.ts). */
  metadata(dir: string, part: string): Promise<MetadataBackup>;
  parts: BackupPart[];
  writer: BackupWriter;
  progress(line: string): void;
  now?: () => Date;
}

const size = (n: number) => (n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`);

export async function takeBackup(o: BackupInput): Promise<BackupManifest> {
  const names = new Set<string>([METADATA_PART, SECRET_PART]);
  for (const p of o.parts) {
    if (names.has(p.name)) throw new Error(`two backup parts are named ${p.name}`);
    names.add(p.name);
  }
  const dir = o.writer.dir;
  const files: ManifestFile[] = [];
  const add = async (path: string) => {
    const f = { path, ...(await sha256File(join(dir, path))) };
    files.push(f);
    return f;
  };
  try {
    o.progress(`backing up to ${o.writer.describe}`);
    const meta = await o.metadata(dir, METADATA_PART);
    const m = await add(meta.file);
    o.progress(`metadata store (${meta.dialect}, ${meta.migrations.length} migrations): ${size(m.size)}`);
    let secretFile: string | null = null;
    if (o.secretFile) {
      secretFile = `${SECRET_PART}/secret.key`;
      await copyPlain(o.secretFile, join(dir, secretFile));
      await add(secretFile);
      o.progress('secret (sealed keys and certificates stay sealed with it)');
    }
    for (const part of o.parts) {
      if (part.own) await part.own.take(join(dir, part.name), (line) => o.progress(`${part.name}: ${line}`));
      const list = part.own ? await listFiles(join(dir, part.name)) : await listFiles(part.dir, part.skip, part.sqlite);
      let bytes = 0;
      for (const [i, rel] of list.entries()) {
        const path = `${part.name}/${rel}`;
        // (An area's own part is in the backup already.)
        if (!part.own && part.sqlite?.test(rel)) await copySqlite(join(part.dir, rel), join(dir, path));
        else if (!part.own) await copyPlain(join(part.dir, rel), join(dir, path));
        bytes += (await add(path)).size;
        if ((i + 1) % 100 === 0) o.progress(`${part.name}: ${i + 1}/${list.length} files`);
      }
      o.progress(`${part.name}: ${list.length} file(s), ${size(bytes)}`);
    }
    const manifest: BackupManifest = {
      format: MANIFEST_FORMAT,
      version: o.version,
      createdAt: (o.now?.() ?? new Date()).toISOString(),
      node: o.node,
      metadata: { dialect: meta.dialect, file: meta.file },
      migrations: meta.migrations,
      secret: { file: secretFile, check: secretCheck(o.secret) },
      parts: o.parts.map((p) => p.name),
      files,
    };
    await o.writer.commit(
      files.map((f) => f.path),
      `${JSON.stringify(manifest, null, 1)}\n`,
      o.progress,
    );
    const total = files.reduce((s, f) => s + f.size, 0);
    o.progress(`complete: ${files.length} files, ${size(total)}, manifest written last`);
    return manifest;
  } catch (e) {
    await o.writer.abandon();
    throw e;
  }
}
