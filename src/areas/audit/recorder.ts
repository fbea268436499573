// Records the audit entry of every mutating call to a registry operation and of every refused credential
// (401/403), at the end of the request and before its response is written: an `onSend` hook, which
// Fastify awaits before sending, so an answered request always has its entry committed. MCP tool calls
// are REST requests replayed in process, so they pass here too (with the MCP caller's address). Why not
// in the change's own transaction: docs/decisions.md, "Audit log: recorded before the answer".
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { notedPrincipal, replayOriginOf } from '../../platform/audit-context.js';
import type { Authenticator, Principal, SchemeName } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { isRelayed } from '../../platform/node-forward.js';
import type { AuditRecord, AuditWriter } from './chain.js';
import type { RefusalAggregator } from './refusals.js';

const ANY_SCHEME: SchemeName[] = ['owner', 'agent', 'fleetAgent', 'fleetPublic', 'client', 'database'];
const DONE = Symbol('auditRecorded');
/** Stored lengths of what the client chooses. */
const MAX_UA = 512;
const MAX_ID = 200;

export interface RecorderDeps {
  writer: AuditWriter;
  auth: Authenticator;
  /** An owner key's name by its id. */
  keyName(id: string): string | undefined | Promise<string | undefined>;
  /** Bounds the entries of refusals that name no account (refusals.ts). */
  refusals?: RefusalAggregator;
}

export function installAuditRecorder(app: FastifyInstance, deps: RecorderDeps): void {
  app.addHook('onSend', (req, reply, payload, done) => {
    const status = reply.statusCode;
    const refused = status === 401 || status === 403;
    const opId = (req.routeOptions.config as { operationId?: string } | undefined)?.operationId;
    const mutating = req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'OPTIONS';
    // A 429 never reached the operation: recording it would let a flood write a row per refusal.
    const audited = opId ? (mutating && status !== 429) || refused : refused && req.url.startsWith('/api/mcp');
    const r = req as unknown as Record<symbol, boolean>;
    if (!audited || r[DONE]) return done(null, payload);
    // Once per request: an error while recording is answered through the error handler, which sends again.
    r[DONE] = true;
    record(deps, req, reply, opId ?? 'mcp', payload).then(
      () => done(null, payload),
      (err: unknown) => {
        req.log.error({ err }, 'audit entry not recorded; the call is answered as failed');
        done(null, unrecorded(reply, payload));
      },
    );
  });
}

/**
 * The answer of a call whose entry could not be written: a clean 500 InternalError, whatever the call
 * answered. Written here rather than handed to Fastify as an error: when the answer already came from
 * the error handler (a 400, 404, 403), Fastify passes a second error to its own fallback handler, which
 * keeps the status and writes the error's `code` and message: the store's (a PostgreSQL SQLSTATE).
 */
function unrecorded(reply: FastifyReply, payload: unknown): string {
  if (payload instanceof Readable) payload.destroy();
  const e = errors.internal();
  for (const h of DROPPED_HEADERS) reply.removeHeader(h);
  reply.code(e.status).header('content-type', 'application/json; charset=utf-8');
  return JSON.stringify(e.toBody());
}

/** Headers that describe the answer the 500 replaces. */
const DROPPED_HEADERS = ['content-length', 'content-encoding', 'content-disposition', 'content-range', 'transfer-encoding', 'location', 'etag', 'last-modified'];

async function record(deps: RecorderDeps, req: FastifyRequest, reply: FastifyReply, operation: string, payload: unknown): Promise<void> {
  const status = reply.statusCode;
  const body = status >= 400 || !hasIdParam(req) ? jsonOf(payload) : undefined;
  // A 401's credential resolves to no one (that is why it was refused), but for an expired key: only
  // those and 403s are looked up again, so a flood of unknown keys costs no second lookup each.
  const again = status === 403 || (status === 401 && body?.code === 'KeyExpired');
  const principal = notedPrincipal(req) ?? (again ? await whose(deps.auth, req) : undefined);
  const origin = replayOriginOf(req.headers);
  const keyId = principal?.credentialId ?? null;
  const keyName = keyId && principal?.scheme === 'owner' ? ((await deps.keyName(keyId)) ?? null) : null;
  const ua = origin ? origin.userAgent : header(req.headers['user-agent']);
  const now = Date.now();
  const entry: AuditRecord = {
    id: newId('aud', now),
    owner_id: principal?.ownerId ?? '',
    created_at: now,
    workspace_id: storable(workspaceOf(req, body, principal)),
    key_id: keyId,
    key_name: keyName,
    scheme: principal && principal.scheme !== 'public' ? principal.scheme : null,
    operation,
    method: req.method,
    resource_id: storable(resourceId(req, status, body)),
    status,
    error_code: status >= 400 && typeof body?.code === 'string' ? body.code.slice(0, MAX_ID) : null,
    source_ip: origin ? origin.ip : sourceIp(req),
    user_agent: ua === undefined ? null : storable(ua.slice(0, MAX_UA)),
    request_id: origin ? origin.requestId : req.id,
    via: origin ? origin.via : 'rest',
  };
  // A refusal naming no account is counted rather than written once its address had its few entries.
  if (entry.owner_id === '' && deps.refusals && !deps.refusals.admit(entry)) return;
  await deps.writer.append(entry);
}

/** Whose credential a refused request carried, when it names an account at all (a 403, an expired key). */
async function whose(auth: Authenticator, req: FastifyRequest): Promise<Principal | undefined> {
  try {
    // Identified, not authorized: a scoped key refused for its scope or address is still its account's.
    const p = await auth.identify({ authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] }, ANY_SCHEME);
    return p.scheme === 'public' ? undefined : p;
  } catch {
    return undefined;
  }
}

function hasIdParam(req: FastifyRequest): boolean {
  const params = req.params as Record<string, unknown> | undefined;
  return !!params && Object.keys(params).length > 0;
}

/** The resource the call addressed: its path's `id` (else its first parameter), or what a create made. */
function resourceId(req: FastifyRequest, status: number, body: Record<string, unknown> | undefined): string | null {
  const params = req.params as Record<string, unknown> | undefined;
  if (params) {
    const v = params.id ?? Object.values(params)[0];
    if (typeof v === 'string' && v) return v.slice(0, MAX_ID);
  }
  if (status < 300 && typeof body?.id === 'string') return body.id.slice(0, MAX_ID);
  return null;
}

/**
 * What the caller sent, as text the store can hold: PostgreSQL text cannot hold NUL, which a path
 * parameter may carry (the call is a 404, and its entry must still be written).
 */
/**
 * The workspace a call was about, where the call says it: the answer's `workspaceId` (a create), else
 * the request's (body or query), else the only workspace of a key narrowed to one; null otherwise (a
 * call by id answered without a body to read).
 */
function workspaceOf(req: FastifyRequest, body: Record<string, unknown> | undefined, p: { scope?: { workspaceIds?: ReadonlySet<string> } } | undefined): string | null {
  const named = (o: unknown) => {
    const v = o && typeof o === 'object' ? (o as { workspaceId?: unknown }).workspaceId : undefined;
    return typeof v === 'string' ? v.slice(0, MAX_ID) : undefined;
  };
  const only = p?.scope?.workspaceIds?.size === 1 ? [...p.scope.workspaceIds][0]! : undefined;
  return named(body) ?? named(req.body) ?? named(req.query) ?? only ?? null;
}

function storable(v: string | null): string | null {
  return v === null ? null : v.replaceAll('\u0000', '\uFFFD');
}

function jsonOf(payload: unknown): Record<string, unknown> | undefined {
  if (typeof payload !== 'string' || payload[0] !== '{') return undefined;
  try {
    return JSON.parse(payload) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** The client's address; on a request another node relayed, the address that node saw (the last hop it added). */
function sourceIp(req: FastifyRequest): string {
  if (isRelayed(req)) {
    const hops = header(req.headers['x-forwarded-for'])?.split(',');
    const last = hops?.at(-1)?.trim();
    if (last) return last;
  }
  return req.ip;
}
