import type { File } from './schemas.js';
import type { FileRow } from './repo.js';

export const DAY_MS = 86_400_000;
/** Spec: deleted files are recoverable for 7 days (the same on every plan). */
export const TRASH_RETENTION_MS = 7 * DAY_MS;

export function purgeAt(row: Pick<FileRow, 'deleted_at'>): number {
  return (row.deleted_at ?? 0) + TRASH_RETENTION_MS;
}

/** The API view of a record. `publicBase` is nube's public URL (the stable URL of public files). */
export function toFile(row: FileRow, publicBase: string, now: number): File {
  const file: File = {
    id: row.id,
    name: row.name,
    contentType: row.content_type,
    size: row.size,
    access: row.access as File['access'],
    status: row.status as File['status'],
    region: row.region as File['region'],
    assetId: row.asset_id,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    url: row.access === 'public' ? `${publicBase}/public/files/${row.id}/${encodeURIComponent(row.name)}` : null,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
    deletedAt: row.deleted_at === null ? null : new Date(row.deleted_at).toISOString(),
    workspaceId: row.workspace_id,
  };
  if (row.status === 'DELETED') file.daysUntilPurge = Math.max(0, Math.ceil((purgeAt(row) - now) / DAY_MS));
  return file;
}

/** Opaque cursor: the last id of the page (ids are time-ordered, so `id <` is stable under inserts). */
export function encodeCursor(id: string): string {
  return Buffer.from(JSON.stringify({ v: 1, id })).toString('base64url');
}

export function decodeCursor(cursor: string): string | undefined {
  try {
    const c = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as { v?: unknown; id?: unknown };
    if (c.v === 1 && typeof c.id === 'string' && /^file_[0-9a-z]{21}$/.test(c.id)) return c.id;
  } catch {
    // falls through: any undecodable cursor is a 400 for the caller
  }
  return undefined;
}
