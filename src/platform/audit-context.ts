// What the audit log (areas/audit) reads of a request that the REST layer knows and the response does
// not carry: the principal the credential resolved to, and, for a tool call that MCP replays through a
// REST route in process, the outer request's caller (its address, user agent and request id), which the
// replayed request cannot have. The replay carries a random handle to it in a header, live only while
// the call runs: a client cannot guess one, so nothing it sends can claim another caller.
import { randomBytes } from 'node:crypto';
import type { Principal } from './auth.js';

const PRINCIPAL = Symbol('auditPrincipal');

/** Set by the REST layer once the credential is resolved (before scope checks, rate limits, validation). */
export function notePrincipal(req: object, p: Principal): void {
  (req as Record<symbol, Principal>)[PRINCIPAL] = p;
}

export function notedPrincipal(req: object): Principal | undefined {
  return (req as Record<symbol, Principal | undefined>)[PRINCIPAL];
}

/** The caller of an MCP request whose tool calls run as in-process REST requests. */
export interface ReplayOrigin {
  via: 'mcp';
  ip: string;
  userAgent: string | undefined;
  requestId: string;
  /** The bridge address the MCP request came from through the box API, which its replays keep. */
  box?: string;
}

/** Header of a replayed request naming its origin's handle. */
export const REPLAY_HEADER = 'x-nube-replay';
const origins = new Map<string, ReplayOrigin>();

/** Runs `fn` with a handle to `origin` to send in REPLAY_HEADER; the handle dies when `fn` settles. */
export async function withReplayOrigin<T>(origin: ReplayOrigin, fn: (handle: string) => Promise<T>): Promise<T> {
  const handle = randomBytes(16).toString('hex');
  origins.set(handle, origin);
  try {
    return await fn(handle);
  } finally {
    origins.delete(handle);
  }
}

/** The origin a replayed request's header names, if it is live. */
export function replayOriginOf(headers: Record<string, string | string[] | undefined>): ReplayOrigin | undefined {
  const h = headers[REPLAY_HEADER];
  return typeof h === 'string' ? origins.get(h) : undefined;
}
