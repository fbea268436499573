// The manifest is a backup's table of contents and its seal: written last (target.ts), so a set of
// files without one is an interrupted backup, never mistaken for a complete one. It names the nube
// version and the migrations its metadata store ran (a restore refuses migrations it does not know),
// and a SHA-256 per file (a restore checks every one before it writes anything).
import { createHash, createHmac } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { z } from 'zod';

export const MANIFEST = 'manifest.json';
export const MANIFEST_FORMAT = 'nube-backup/1';

const fileEntry = z.object({ path: z.string().min(1), size: z.number().int().min(0), sha256: z.string().regex(/^[0-9a-f]{64}$/) });

export const manifestSchema = z.object({
  format: z.literal(MANIFEST_FORMAT),
  version: z.string(),
  createdAt: z.string(),
  /** The node id the installation ran as: rows of databases, sandboxes and machines name it. */
  node: z.string(),
  metadata: z.object({ dialect: z.enum(['sqlite', 'postgres']), file: z.string() }),
  migrations: z.array(z.string()),
  /**
   * Sealed keys and certificates stay sealed with the installation's secret: `file` is the secret's
   * copy (null when the operator gives it as NUBE_SECRET), `check` an HMAC that tells a restore
   * whether the secret it would run with is the same one, without revealing it.
   */
  secret: z.object({ file: z.string().nullable(), check: z.string() }),
  parts: z.array(z.string()),
  files: z.array(fileEntry),
});
export type BackupManifest = z.infer<typeof manifestSchema>;
export type ManifestFile = z.infer<typeof fileEntry>;

export function secretCheck(secret: string): string {
  return createHmac('sha256', secret).update('nube backup: is this the secret the keys were sealed with').digest('hex');
}

export async function sha256File(path: string): Promise<{ sha256: string; size: number }> {
  const h = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path)) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).byteLength;
  }
  return { sha256: h.digest('hex'), size };
}

/** A manifest's text, parsed; throws saying what is wrong with it. */
export function parseManifest(text: string): BackupManifest {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`${MANIFEST} is not JSON: the backup is damaged`);
  }
  const r = manifestSchema.safeParse(json);
  if (!r.success) {
    const format = (json as { format?: unknown })?.format;
    if (typeof format === 'string' && format !== MANIFEST_FORMAT)
      throw new Error(`the backup's format is ${format}; this nube reads ${MANIFEST_FORMAT}: restore it with the nube that made it`);
    throw new Error(`${MANIFEST} is not a nube backup manifest (${r.error.issues[0]?.path.join('.')}: ${r.error.issues[0]?.message})`);
  }
  for (const f of r.data.files) {
    if (f.path.split('/').some((s) => s === '..' || s === '' || s === '.') || f.path.startsWith('/'))
      throw new Error(`${MANIFEST} names a path outside the backup: ${f.path}`);
  }
  return r.data;
}
