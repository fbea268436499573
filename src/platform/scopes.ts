import { errors } from './errors.js';
import { pathParamNames } from './path-params.js';

/** What the checks read of an operation (the registry's OperationRef has it; typed here so this module,
 * which platform/auth.ts imports, does not import the registry's types). */
export interface OperationRef {
  id: string;
  method: string;
  access?: 'read' | 'write';
  path: string;
}

/**
 * Scoped owner keys: what an operation is (its area, whether it reads or writes) is derived here and
 * nowhere else, from the registry: the area is the id's first segment, a GET reads and every other
 * method writes unless the operation says `access` itself (a POST that only searches).
 */
export type Access = 'read' | 'write';

export function opArea(op: Pick<OperationRef, 'id'>): string {
  const dot = op.id.indexOf('.');
  return dot < 0 ? op.id : op.id.slice(0, dot);
}

export function opAccess(op: Pick<OperationRef, 'method' | 'access'>): Access {
  return op.access ?? (op.method === 'GET' ? 'read' : 'write');
}

/** The scope an operation needs, as a key names it: `<area>:<read|write>`. */
export function scopeOf(op: Pick<OperationRef, 'id' | 'method' | 'access'>): string {
  return `${opArea(op)}:${opAccess(op)}`;
}

/** Money a key may consume per month; metered in usage_counters under the key's id. */
export const CAP_METRICS = ['aiCredits', 'llmTokens', 'webQueries', 'sandboxCpuSeconds'] as const;
export type CapMetric = (typeof CAP_METRICS)[number];
export type Caps = Partial<Record<CapMetric, number>>;

/** What a scoped key carries on its principal. An owner key without a scope has none of this. */
export interface KeyScope {
  /** Scopes as the key was created with (areas and operation ids). */
  scopes: readonly string[];
  /** Operation ids the key may call, compiled once when the key is resolved. */
  allowed: ReadonlySet<string>;
  /** Ids of resources the key is narrowed to; their areas take nothing else. */
  resourceIds?: ReadonlySet<string>;
  /** Areas some resource id belongs to (sandboxes, databases, agents, files, machines). */
  resourceAreas?: ReadonlySet<string>;
  /** Workspaces the key reaches (platform/workspaces.ts): their resources only, others are 404. */
  workspaceIds?: ReadonlySet<string>;
  /** Epoch ms after which the key is refused (401). */
  expiresAt?: number;
  caps?: Caps;
  allowedIps?: readonly string[];
}

/** Resource id prefixes and the area each names. */
export const RESOURCE_PREFIXES: Record<string, string> = {
  sbx_: 'sandboxes',
  db_: 'databases',
  agt_: 'agents',
  file_: 'files',
  mch_: 'machines',
};

export function resourceArea(id: string): string | undefined {
  for (const p in RESOURCE_PREFIXES) if (id.startsWith(p)) return RESOURCE_PREFIXES[p];
  return undefined;
}

/** The registry's operations that owner keys reach: the only ones a scope can name. */
/**
 * The one check of a scoped key against an operation (REST, WebSocket operations, MCP replays through
 * REST): 403 ScopeMissing naming the scope it lacks. `id`, `method`, `access` of the operation.
 */
export function checkScope(scope: KeyScope, op: Pick<OperationRef, 'id' | 'method' | 'access'>): void {
  if (scope.allowed.has(op.id)) return;
  const need = scopeOf(op);
  throw errors.forbidden(`this key's scope lacks ${need} (or the operation ${op.id}) that ${op.id} needs`, 'ScopeMissing', { scope: need, operation: op.id });
}

/**
 * A key narrowed to resources reaches, in the areas of those resources, only operations addressing one
 * of them by a path parameter: not their lists or creates.
 */
export function checkResource(scope: KeyScope, op: Pick<OperationRef, 'id' | 'path'>, params: Record<string, unknown> | undefined): void {
  const ids = scope.resourceIds;
  if (!ids || !scope.resourceAreas?.has(opArea(op))) return;
  for (const name of pathParamNames(op.path)) {
    const v = params?.[name];
    if (typeof v === 'string' && ids.has(v)) return;
  }
  throw errors.forbidden(
    `this key is narrowed to ${[...ids].join(', ')}: in ${opArea(op)} it reaches only operations on those`,
    'ScopeMissing',
    { scope: `resource:${[...ids].filter((i) => resourceArea(i) === opArea(op)).join(',')}`, operation: op.id },
  );
}

/**
 * How `child` reaches further than `parent` (so `parent` could not have created it), or undefined when
 * `parent` covers it: every operation, within its resources, expiry, caps and addresses. A full key
 * (no scope) is covered by no scoped key. Boxes holding a key nube minted are reached only by callers
 * that cover that key (areas/account/key-scope.ts), the rule keys creating keys follow.
 */
export function widerThan(child: KeyScope | undefined, parent: KeyScope): string | undefined {
  if (!child) return 'it is a full owner key';
  const extra = [...child.allowed].filter((id) => !parent.allowed.has(id));
  if (extra.length) return `it may call ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ` and ${extra.length - 5} more` : ''}`;
  const pr = parent.resourceIds;
  if (pr && (!child.resourceIds || [...child.resourceIds].some((id) => !pr.has(id)))) return `it reaches resources beyond ${[...pr].join(', ')}`;
  const pw = parent.workspaceIds;
  if (pw && (!child.workspaceIds || [...child.workspaceIds].some((id) => !pw.has(id)))) return `it reaches workspaces beyond ${[...pw].join(', ')}`;
  if (parent.expiresAt !== undefined && (child.expiresAt === undefined || child.expiresAt > parent.expiresAt)) return 'it outlives this key';
  for (const [m, limit] of Object.entries(parent.caps ?? {}) as [CapMetric, number][]) {
    if ((child.caps?.[m] ?? Number.POSITIVE_INFINITY) > limit) return `its ${m} cap is above this key's ${limit}`;
  }
  const ips = parent.allowedIps;
  if (ips && (!child.allowedIps || child.allowedIps.some((a) => !ips.includes(a)))) return 'it is accepted from addresses this key is not';
  return undefined;
}

/** allowedIps: exact addresses or IPv4 CIDR ranges. */
export function ipAllowed(allowed: readonly string[], ip: string | undefined): boolean {
  if (!ip) return false;
  const v4 = ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  for (const a of allowed) {
    if (a === ip || a === v4) return true;
    const slash = a.indexOf('/');
    if (slash > 0) {
      const base = ipv4(a.slice(0, slash));
      const bits = Number(a.slice(slash + 1));
      const x = ipv4(v4);
      if (base !== undefined && x !== undefined && bits >= 0 && bits <= 32) {
        const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
        if (((base & mask) >>> 0) === ((x & mask) >>> 0)) return true;
      }
    }
  }
  return false;
}

function ipv4(s: string): number | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s);
  if (!m) return undefined;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return undefined;
  return (((parts[0]! << 24) | (parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) >>> 0);
}
