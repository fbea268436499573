import type { Readable } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import type { WebSocket } from 'ws';
import type { z } from 'zod';
import type { Principal, SchemeName } from './auth.js';
import type { RateLimitSettings } from './config-shape.js';

/**
 * Area services reachable from handlers. Platform code knows none of them: each area adds its service
 * with declaration merging (`declare module '../../platform/operation.js' { interface Services {...} }`).
 */
// biome-ignore lint/suspicious/noEmptyInterface: augmented by areas
export interface Services {}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

type ZObj = z.ZodObject<z.ZodRawShape>;

/** A response that is not JSON: a stream (SSE, PDF, a file) with its own content type. */
export class RawResponse {
  constructor(
    readonly body: Readable | AsyncIterable<string | Buffer> | Buffer | string,
    readonly contentType: string,
    readonly headers: Record<string, string> = {},
    readonly status = 200,
  ) {}
}

export interface OpContext<P, Q, B> {
  principal: Principal;
  params: P;
  query: Q;
  body: B;
  services: Services;
  log: FastifyBaseLogger;
  requestId: string;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  headers: Record<string, string | string[] | undefined>;
}

export interface RateLimitRule {
  /** Requests allowed per window for one owner on this operation. */
  points: number;
  windowSeconds: number;
  /** An operator setting (config.rateLimits) that replaces `points`, per the caller's plan. */
  setting?: keyof RateLimitSettings;
}

export interface OperationSpec<
  PS extends ZObj | undefined = undefined,
  QS extends ZObj | undefined = undefined,
  BS extends z.ZodType | undefined = undefined,
  RS extends z.ZodType = z.ZodType,
> {
  /** Stable id, `area.verb` (`sandboxes.create`); the MCP tool name is the id with `.` as `_`. */
  id: string;
  method: HttpMethod;
  /** Path under /api/v2 with `{param}` placeholders. */
  path: string;
  /** Extra method/path pairs served by the same operation (spec's "PUT alias"). */
  aliases?: { method: HttpMethod; path: string }[];
  summary: string;
  description?: string;
  tags: string[];
  /** Credential schemes accepted; `public` means no credential is needed. */
  auth: SchemeName[];
  /** For scoped keys: whether it reads or writes, when its method says otherwise (a POST that only searches). */
  access?: 'read' | 'write';
  params?: PS;
  query?: QS;
  body?: BS;
  /** Whether the body may be omitted entirely (actions with optional fields). */
  bodyOptional?: boolean;
  /**
   * Top-level body fields whose strings may hold any text, NUL (U+0000) included, because they never
   * reach the metadata store (SQL and its arguments go to the user's database, code and file contents
   * into a sandbox); `true` for the whole body. Everywhere else a NUL is a 400: PostgreSQL text cannot
   * hold it, and both stores must answer alike.
   */
  anyText?: true | readonly string[];
  response: RS;
  /** Content type of a non-JSON success response (the handler returns a RawResponse); several: comma separated. */
  produces?: string;
  successStatus?: 200 | 201;
  /** Error statuses and codes this operation documents beyond 400/401/404/429/500. */
  errors?: { status: number; code?: string; description?: string }[];
  rateLimit?: RateLimitRule;
  /**
   * The operation is a WebSocket (`GET` with `Upgrade: websocket`): auth, rate limit and params/query
   * validation run as for REST, then this returns what to do with the open socket. A plain GET of the
   * path gets the handler's answer (426 UpgradeRequired). Errors before the upgrade leave as HTTP answers.
   */
  websocket?: (ctx: OpContext<Infer<PS>, Infer<QS>, undefined>) => Promise<(ws: WebSocket) => void>;
  /** Absent until the area is built: the operation answers 501 NotImplemented. */
  handler?: (
    ctx: OpContext<Infer<PS>, Infer<QS>, Infer<BS>>,
  ) => Promise<z.input<RS> | RawResponse> | z.input<RS> | RawResponse;
}

type Infer<S> = S extends z.ZodType ? z.output<S> : undefined;

// biome-ignore lint/suspicious/noExplicitAny: the registry holds operations of every shape
export type AnyOperation = OperationSpec<any, any, any, any>;

/** Declares one operation; the only place its route, schemas and docs are written. */
export function defineOperation<
  PS extends ZObj | undefined = undefined,
  QS extends ZObj | undefined = undefined,
  BS extends z.ZodType | undefined = undefined,
  RS extends z.ZodType = z.ZodType,
>(spec: OperationSpec<PS, QS, BS, RS>): OperationSpec<PS, QS, BS, RS> {
  return spec;
}

export function toolName(op: AnyOperation): string {
  return op.id.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** `/sandboxes/{id}` -> `/sandboxes/:id` */
export function fastifyPath(path: string): string {
  return path.replace(/\{([A-Za-z0-9_]+)\}/g, ':$1');
}

export { pathParamNames } from './path-params.js';

export function fillPath(path: string, values: Record<string, unknown>): string {
  return path.replace(/\{([A-Za-z0-9_]+)\}/g, (_, k: string) => encodeURIComponent(String(values[k] ?? '')));
}
