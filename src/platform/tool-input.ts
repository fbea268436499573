import { z } from 'zod';
import { type JsonSchema, inputSchema } from './json-schema.js';
import { type AnyOperation, fillPath } from './operation.js';

/**
 * An operation seen as a tool: one flat argument object. Path and query parameters are top-level
 * arguments; an object body's fields are top-level too unless a name collides or the body is not a
 * plain object (a union), in which case the body travels whole under `body`.
 */
export function bodyIsFlat(op: AnyOperation): boolean {
  if (!op.body || !(op.body instanceof z.ZodObject)) return false;
  const taken = new Set([...Object.keys(op.params?.shape ?? {}), ...Object.keys(op.query?.shape ?? {})]);
  return Object.keys(op.body.shape).every((k) => !taken.has(k) && k !== 'body');
}

export function toolInputSchema(op: AnyOperation): JsonSchema {
  const properties: Record<string, unknown> = {};
  const required: string[] = [];
  for (const part of [op.params, op.query]) {
    if (!part) continue;
    const s = inputSchema(part);
    Object.assign(properties, s.properties as object);
    required.push(...((s.required as string[] | undefined) ?? []));
  }
  if (op.body) {
    const s = inputSchema(op.body);
    if (bodyIsFlat(op)) {
      Object.assign(properties, s.properties as object);
      if (!op.bodyOptional) required.push(...((s.required as string[] | undefined) ?? []));
    } else {
      properties.body = s;
      if (!op.bodyOptional) required.push('body');
    }
  }
  const out: JsonSchema = { type: 'object', properties };
  if (required.length) out.required = [...new Set(required)];
  return out;
}

export interface ToolRequest {
  method: string;
  url: string;
  body?: unknown;
}

/** Maps tool arguments back to the REST request they stand for. */
export function toolRequest(op: AnyOperation, prefix: string, args: Record<string, unknown>): ToolRequest {
  const paramNames = Object.keys(op.params?.shape ?? {});
  const queryNames = Object.keys(op.query?.shape ?? {});
  const qs = new URLSearchParams();
  for (const k of queryNames) {
    const v = args[k];
    if (v === undefined || v === null) continue;
    for (const item of Array.isArray(v) ? v : [v]) qs.append(k, typeof item === 'object' ? JSON.stringify(item) : String(item));
  }
  let body: unknown;
  if (op.body) {
    if (bodyIsFlat(op)) {
      const fields = Object.fromEntries(
        Object.entries(args).filter(([k]) => !paramNames.includes(k) && !queryNames.includes(k)),
      );
      body = fields;
    } else {
      body = args.body;
    }
  }
  const q = qs.toString();
  return { method: op.method, url: prefix + fillPath(op.path, args) + (q ? `?${q}` : ''), body };
}
