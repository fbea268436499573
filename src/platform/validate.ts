import type { z } from 'zod';
import { type ErrorIssue, errors } from './errors.js';

export function zodIssues(error: z.ZodError, prefix: (string | number)[] = []): ErrorIssue[] {
  return error.issues.map((i) => ({
    path: [...prefix, ...i.path.map((p) => (typeof p === 'symbol' ? String(p) : p))],
    message: i.message,
    code: i.code,
  }));
}

/** Parses `value` with `schema` or throws a 400 whose issues are located under `where`. */
export function parseOr400<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  const r = schema.safeParse(value);
  if (!r.success) throw errors.validation(zodIssues(r.error, [where]));
  return r.data;
}
