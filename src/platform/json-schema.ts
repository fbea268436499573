import { z } from 'zod';

export type JsonSchema = Record<string, unknown>;

/** JSON Schema 2020-12 (OpenAPI 3.1's dialect) of a zod schema, as the client sends it. */
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
