// Query strings and bodies of E2B's control plane: parsed strictly (an unknown parameter is a 400, never
// ignored), errors in nube's `issues` shape inside E2B's `{code, message}`.
import { z } from 'zod';
import { errors } from '../../platform/errors.js';

type Query = Record<string, string | string[] | undefined>;

function issues(e: z.ZodError, where: 'body' | 'query') {
  return e.issues.map((i) => ({ path: [where, ...i.path.map(String)], message: i.message }));
}

/** Bodies arrive raw (the adapter's scope parses nothing): JSON, or nothing. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  let value: unknown = body;
  if (Buffer.isBuffer(body)) {
    try {
      value = body.length ? JSON.parse(body.toString('utf8')) : {};
    } catch {
      throw errors.badRequest('body is not JSON', [{ path: ['body'], message: 'not JSON' }]);
    }
  }
  const r = schema.safeParse(value ?? {});
  if (!r.success) throw errors.validation(issues(r.error, 'body'));
  return r.data;
}

/** The query's parameters, each one of `allowed`; a parameter given twice is a list. */
export function parseQuery<S extends z.ZodObject>(schema: S, query: Query): z.output<S> {
  const r = schema.strict().safeParse(query ?? {});
  if (!r.success) {
    const unknown = r.error.issues.find((i) => i.code === 'unrecognized_keys') as { keys?: string[] } | undefined;
    const message = unknown?.keys?.length
      ? `unknown query parameter${unknown.keys.length > 1 ? 's' : ''} ${unknown.keys.join(', ')}: this API takes ${Object.keys(schema.shape).join(', ')}`
      : 'invalid query';
    throw errors.badRequest(message, issues(r.error, 'query'));
  }
  return r.data as z.output<S>;
}

/** `a,b` and `a&a` alike: a list of strings. */
export const list = z
  .union([z.string(), z.array(z.string())])
  .transform((v) => (Array.isArray(v) ? v : [v]).flatMap((s) => s.split(',')).filter(Boolean));

/** One value (a repeated parameter is refused). */
export const single = z.string();

/** `metadata=k1%3Dv1%26k2%3Dv2`: URL-encoded pairs whose keys and values the SDK encoded once more. */
export function metadataFilter(raw: string | undefined): Record<string, string> {
  if (!raw) return {};
  try {
    return Object.fromEntries([...new URLSearchParams(raw).entries()].map(([k, v]) => [decodeURIComponent(k), decodeURIComponent(v)]));
  } catch {
    throw errors.badRequest('metadata is not URL-encoded key=value pairs', [{ path: ['query', 'metadata'], message: 'malformed' }]);
  }
}

/** Opaque page tokens: where the previous page stopped (start time and id of its last item). */
export function pageToken(at: number, id: string): string {
  return Buffer.from(JSON.stringify([at, id])).toString('base64url');
}

export function readPageToken(token: string | undefined): { at: number; id: string } | undefined {
  if (token === undefined) return undefined;
  try {
    const [at, id] = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as [unknown, unknown];
    if (typeof at === 'number' && typeof id === 'string') return { at, id };
  } catch {
    /* below */
  }
  throw errors.badRequest('nextToken is not one this API gave', [{ path: ['query', 'nextToken'], message: 'unknown token' }]);
}

/**
 * One page of `items` sorted by (time, id) in `order`, after `from`: the page and the token of the
 * next one, if any.
 */
export function page<T>(
  items: T[],
  key: (t: T) => { at: number; id: string },
  o: { order: 'asc' | 'desc'; limit: number; from?: { at: number; id: string } },
): { items: T[]; next?: string } {
  const dir = o.order === 'asc' ? 1 : -1;
  const cmp = (a: { at: number; id: string }, b: { at: number; id: string }) => dir * (a.at - b.at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const sorted = [...items].sort((a, b) => cmp(key(a), key(b)));
  const rest = o.from ? sorted.filter((t) => cmp(key(t), o.from!) > 0) : sorted;
  const out = rest.slice(0, o.limit);
  const last = out[out.length - 1];
  return { items: out, ...(rest.length > o.limit && last ? { next: pageToken(key(last).at, key(last).id) } : {}) };
}
