import { type AnyOperation, toolName } from './operation.js';
import { toolInputSchema } from './tool-input.js';
import { API_PREFIX } from './rest.js';
import type { JsonSchema } from './json-schema.js';

export interface CatalogTool {
  name: string;
  description: string;
  inputSchema: JsonSchema;
  method: string;
  path: string;
  auth: string[];
  implemented: boolean;
}

/** The public tool catalogue (GET /api/tools.json), derived from the registry. */
export function buildCatalog(ops: AnyOperation[]): { version: 2; count: number; tools: CatalogTool[] } {
  const tools = ops.map((op) => ({
    name: toolName(op),
    description: describe(op),
    inputSchema: toolInputSchema(op),
    method: op.method,
    path: API_PREFIX + op.path,
    auth: [...op.auth],
    implemented: Boolean(op.handler),
  }));
  return { version: 2, count: tools.length, tools };
}

export function describe(op: AnyOperation): string {
  const base = op.description ? `${op.summary}. ${op.description}` : op.summary;
  return op.handler ? base : `${base} (not implemented yet: answers 501)`;
}
