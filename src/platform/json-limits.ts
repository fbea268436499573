import { z } from 'zod';

// Limits on what a request's JSON may hold, wherever it is free-form (docs/decisions.md, Platform,
// "Hostile input"). Free-form values are stored as JSON text and serialized again for every answer
// and event, and JSON.stringify recurses: 5,000 levels of nesting overflowed the stack (a 500). NUL is
// refused because PostgreSQL text cannot hold it (SQLite can: the two stores answered differently).

/** Deepest nesting of any request body (objects and arrays), whatever the operation. */
export const MAX_BODY_DEPTH = 64;

export interface JsonLimits {
  /** Levels of nesting below the value itself (a flat object is depth 1). */
  maxDepth: number;
  /**
   * Size of the value as JSON text, in UTF-8 bytes. Omitted only where the value is the body itself or
   * carries bulk text (file contents, code): the request body limit (NUBE_BODY_LIMIT_BYTES) bounds it.
   */
  maxBytes?: number;
  /** Keys of the value itself (records). */
  maxKeys?: number;
}

/** Nesting depth of a JSON value, computed without recursion; stops counting past `max`. */
export function jsonDepth(value: unknown, max = Number.POSITIVE_INFINITY): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    const depth = d + 1;
    if (depth > deepest) deepest = depth;
    if (deepest > max) return deepest;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth]);
    }
  }
  return deepest;
}

/**
 * Where a JSON value holds U+0000, in a string or a key, as paths from the value (at most `limit` of
 * them); empty when nowhere. Without recursion.
 */
export function nulPaths(value: unknown, limit = 10): (string | number)[][] {
  const found: (string | number)[][] = [];
  const stack: [unknown, (string | number)[]][] = [[value, []]];
  while (stack.length && found.length < limit) {
    const [v, path] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\u0000')) found.push(path);
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push([v[i], [...path, i]]);
    } else if (v !== null && typeof v === 'object') {
      for (const [k, child] of Object.entries(v)) {
        if (k.includes('\u0000')) found.push([...path, k]);
        stack.push([child, [...path, k]]);
      }
    }
  }
  return found.slice(0, limit);
}

export const NUL_MESSAGE = 'must not contain the NUL character (U+0000)';

const LIMIT_CHECKS = new WeakSet<object>();

/**
 * `schema` with depth and size limits (400 with an issue when exceeded). Every free-form object, record
 * or unknown value an operation accepts must be wrapped so (a registry test checks it).
 */
export function limited<T extends z.ZodType>(schema: T, limits: JsonLimits): T {
  const check = z.superRefine((value: unknown, ctx) => {
    if (limits.maxKeys !== undefined && value !== null && typeof value === 'object' && Object.keys(value).length > limits.maxKeys) {
      ctx.addIssue({ code: 'custom', message: `at most ${limits.maxKeys} keys` });
      return;
    }
    if (jsonDepth(value, limits.maxDepth) > limits.maxDepth) {
      ctx.addIssue({ code: 'custom', message: `nested deeper than ${limits.maxDepth} levels` });
      return;
    }
    if (limits.maxBytes !== undefined && Buffer.byteLength(JSON.stringify(value) ?? '') > limits.maxBytes) {
      ctx.addIssue({ code: 'custom', message: `larger than ${limits.maxBytes} bytes as JSON` });
    }
  });
  LIMIT_CHECKS.add(check);
  return schema.check(check) as T;
}

/** Whether `schema` itself carries limits from `limited()` (clones made by describe/meta keep them). */
export function isLimited(schema: z.ZodType): boolean {
  const checks = (schema as unknown as { _zod: { def: { checks?: object[] } } })._zod.def.checks ?? [];
  return checks.some((c) => LIMIT_CHECKS.has(c));
}
