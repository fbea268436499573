import { z } from 'zod';

export type JsonSchema = Record<string, unknown>;

/**
 * JSON Schema 2020-12 (OpenAPI 3.1's dialect) of a zod schema, as the client sends it. Schemas named
 * with `.meta({ id })` appear under the result's own `$defs`, so the result stands alone.
 */
export function inputSchema(schema: z.ZodType): JsonSchema {
  return clean(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' }));
}

/** JSON Schema of a zod schema, as the server answers it. */
export function outputSchema(schema: z.ZodType): JsonSchema {
  return clean(z.toJSONSchema(schema, { io: 'output', unrepresentable: 'any', target: 'draft-2020-12' }));
}

function clean(s: JsonSchema): JsonSchema {
  const { $schema: _, ...rest } = s;
  return rest;
}

/**
 * Moves a standalone schema's `$defs` into a shared components map (OpenAPI `components.schemas`),
 * rewriting `#/$defs/X` references to `#/components/schemas/X<suffix>`. Input and output forms of a
 * named schema differ (defaults make fields optional on input), hence the suffix.
 */
export function hoistDefs(schema: JsonSchema, components: Record<string, JsonSchema>, suffix: string): JsonSchema {
  const { $defs, ...rest } = schema as JsonSchema & { $defs?: Record<string, JsonSchema> };
  const rewrite = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rewrite);
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.entries(v).map(([k, x]) => [
          k,
          k === '$ref' && typeof x === 'string' && x.startsWith('#/$defs/') ? `#/components/schemas/${x.slice(8)}${suffix}` : rewrite(x),
        ]),
      );
    }
    return v;
  };
  for (const [name, def] of Object.entries($defs ?? {})) components[name + suffix] = rewrite(def) as JsonSchema;
  return rewrite(rest) as JsonSchema;
}
