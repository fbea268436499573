import { z } from 'zod';
import { limited } from './json-limits.js';

// Shared building blocks for operation schemas.

export const Ok = z.object({ ok: z.literal(true) }).meta({ id: 'Ok' });
export const ok = { ok: true as const };

/** Free-form JSON object in an answer (spec: "200 free-form object"). */
export const FreeObject = z.record(z.string(), z.unknown());

/**
 * Free-form JSON object a client sends and nube keeps (file metadata): stored as JSON text, embedded for
 * search and sent with every event, hence bounded (400 past 16 levels, 256 keys or 16 KiB).
 */
export const FreeObjectInput = limited(z.record(z.string(), z.unknown()), { maxDepth: 16, maxKeys: 256, maxBytes: 16 * 1024 });

/** Name to string (environment, metadata): at most 256 entries, names up to 256 characters, 64 KiB in all. */
export const StringMap = limited(z.record(z.string().max(256), z.string()), { maxDepth: 1, maxKeys: 256, maxBytes: 64 * 1024 });

/** Query strings arrive as text: integers and booleans are coerced, with bounds. */
export const qInt = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
export const qBool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');

export const idParam = (name: string, description = 'Resource id') =>
  z.object({ [name]: z.string().min(1).max(200).describe(description) });

export const PageQuery = z.object({
  limit: qInt(1, 100).default(20).describe('Items per page, 1-100 (default 20)'),
  cursor: z.string().max(500).optional().describe('Opaque cursor from a previous page'),
});

export const IsoTime = z.string().describe('ISO 8601 UTC timestamp');

/** `workspaceId` on a create: where the resource lands (the key's only workspace, else `default`). */
export const WorkspaceIdInput = z
  .string()
  .min(1)
  .max(100)
  .describe('Workspace to create it in (`default` when absent, or the only workspace of a key narrowed to one); unknown: 404');
/** `workspaceId` as a list filter. */
export const WorkspaceFilter = z.object({
  workspaceId: z.string().min(1).max(100).optional().describe('Only resources of this workspace (unknown: 404)'),
});
export const WorkspaceIdOutput = z.string().describe('The workspace it belongs to (`default` or `wsp_...`)');
