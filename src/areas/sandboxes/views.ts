// Rows to API shapes, and driver errors to API errors.
import type { z } from 'zod';
import { ApiError, errors } from '../../platform/errors.js';
import type { SandboxRow, TemplateRow } from './repo.js';
import { SandboxRuntimeError } from './runtime/driver.js';
import type { DerivedTemplate, Sandbox } from './schemas.js';

export type SandboxView = z.input<typeof Sandbox>;
export type DerivedTemplateView = z.input<typeof DerivedTemplate>;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * Public URL of an exposed port: `<scheme>://<port>-<id>.<publicHost>[:<nube's port>]`, the id spelled
 * `sbx-...`: `_` is not allowed in DNS hostnames (wildcard certificates, strict resolvers). The proxy
 * also accepts `sbx_...`.
 */
export function portUrl(publicUrl: string, publicHost: string, id: string, port: number): string {
  const u = new URL(publicUrl);
  const defaultPort = (u.protocol === 'https:' && u.port === '443') || (u.protocol === 'http:' && u.port === '80');
  const hostPort = u.port && !defaultPort ? `:${u.port}` : '';
  return `${u.protocol}//${port}-${id.replace('_', '-')}.${publicHost}${hostPort}`;
}

/** What a starting sandbox waits for (see SandboxesCore.startPhase). */
export interface StartPhase {
  phase: string | null;
  progress: SandboxView['progress'];
}

export function toSandbox(r: SandboxRow, urlOf: (port: number) => string, start?: StartPhase): SandboxView {
  const ports = JSON.parse(r.exposed_ports) as number[];
  return {
    id: r.id,
    status: r.status as SandboxView['status'],
    phase: r.status === 'starting' ? (start?.phase ?? 'starting') : null,
    progress: r.status === 'starting' ? (start?.progress ?? null) : null,
    error: r.status === 'failed' ? r.error : null,
    template: r.template,
    templateKey: r.template_key,
    templateHash: r.template_hash,
    name: r.name,
    metadata: JSON.parse(r.metadata) as Record<string, string>,
    parentId: r.parent_id,
    timeoutSeconds: r.timeout_seconds,
    suspendOnIdle: r.suspend_on_idle === 1,
    idleTtlSeconds: r.idle_ttl_seconds,
    hardTtlSeconds: r.hard_ttl_seconds,
    cpuCount: Math.max(1, Math.round(r.cpus)),
    memoryMB: r.memory_mb,
    diskMB: r.disk_mb,
    createdAt: new Date(r.created_at).toISOString(),
    expiresAt: iso(r.expires_at),
    hardExpiresAt: iso(r.hard_expires_at),
    suspendedAt: iso(r.suspended_at),
    suspendKeepsMemory: r.suspend_keeps_memory === 1,
    memoryKept: r.memory_kept === 1,
    urls: ports.map((port) => ({ port, url: urlOf(port) })),
    workspaceId: r.workspace_id,
  };
}

export function toDerivedTemplate(t: TemplateRow, stale: boolean, children: number): DerivedTemplateView {
  return {
    id: t.id,
    key: t.key,
    hash: t.hash,
    name: t.name,
    baseTemplate: t.base_template,
    baseBuild: t.base_build,
    stale,
    sourceSandboxId: t.source_sandbox_id,
    sizeBytes: t.size_bytes,
    liveChildren: children,
    createdAt: new Date(t.created_at).toISOString(),
  };
}

/** Driver failures as API errors: what the caller did wrong is a 4xx, never a 500. */
export function apiError(e: unknown): unknown {
  if (e instanceof ApiError || !(e instanceof SandboxRuntimeError)) return e;
  switch (e.code) {
    case 'NotFound':
    case 'FileNotFound':
      return new ApiError(404, e.code, e.message);
    case 'InvalidInput':
    case 'NotADirectory':
    case 'IsADirectory':
    case 'DirectoryNotEmpty':
    case 'PatchFailed':
      return errors.badRequest(e.message, undefined, e.code);
    case 'InvalidState':
    case 'AlreadyExists':
    case 'SnapshotInUse':
      return errors.conflict(e.message, e.code, e.details ?? {});
    case 'HostUnsupported':
    case 'TemplateBuildFailed':
      return errors.unavailable(e.message);
    default:
      return e;
  }
}

/** Runs a driver call, translating its errors. */
export async function rt<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    throw apiError(e);
  }
}

export function startingError(): ApiError {
  return errors.conflict(
    'sandbox is starting (its template may be building: GET the sandbox for phase and progress); retry when it is running',
    'SandboxStarting',
  );
}

export function failedError(r: SandboxRow): ApiError {
  return errors.conflict(
    `sandbox failed to start: ${r.error ?? 'unknown reason'}; delete it and create another`,
    'SandboxFailed',
    { reason: r.error },
  );
}

/** What the caller may read of a failed start: the driver's and the API's messages are written for them. */
export function reasonOf(e: unknown): string {
  if (e instanceof ApiError || e instanceof SandboxRuntimeError) return e.message;
  return 'internal error while starting (the server log has the details)';
}
