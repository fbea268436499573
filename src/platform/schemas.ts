import { z } from 'zod';

// Shared building blocks for operation schemas.

export const Ok = z.object({ ok: z.literal(true) }).meta({ id: 'Ok' });
export const ok = { ok: true as const };

/** Free-form JSON object (spec: "200 free-form object"). */
export const FreeObject = z.record(z.string(), z.unknown());

export const StringMap = z.record(z.string(), z.string());

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
