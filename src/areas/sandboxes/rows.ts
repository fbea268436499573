import type { Principal } from '../../platform/auth.js';
import { newId } from '../../platform/ids.js';
import { capKeyId } from '../../platform/usage.js';
import { DEFAULT_WORKSPACE } from '../../platform/workspaces.js';
import type { SandboxRow, TemplateRow } from './repo.js';
import type { SandboxVolume } from './volume-binder.js';

export interface CreateInput {
  template: string;
  timeoutSeconds: number;
  suspendOnIdle: boolean;
  /** Its suspends (the timeout's too) keep its processes and memory by default. */
  suspendKeepsMemory?: boolean;
  templateKey?: string;
  templateHash?: string;
  name?: string;
  metadata?: Record<string, string>;
  env?: Record<string, string>;
  /** Writable disk in MiB (at most the plan's; the plan's by default). */
  diskMB?: number;
  /** Volumes to mount (the volumes area's binder records and resolves them). */
  volumes?: SandboxVolume[];
  /** The machine or agent whose held volumes these are (holdVolumes): the box takes no writer slot. */
  volumeHolder?: string;
  /** CPU, memory and disk of the box (machines' tiers); the driver's defaults otherwise. */
  limits?: Partial<BoxLimits>;
  /** The workspace it lands in (resolved by the service: platform/workspaces.ts forCreate). */
  workspaceId?: string;
}

export interface BoxLimits {
  cpus: number;
  memoryMb: number;
  diskMb?: number;
}

/** Seals a sandbox's environment for its row (the service's secret box). */
export type SealEnv = (env: Record<string, string>) => string;

/** A new record; `derived` and `parent` say what it starts from (snapshots are the driver's). */
export function newRow(
  seal: SealEnv,
  p: Principal,
  input: CreateInput,
  from: { derived?: TemplateRow; parent?: SandboxRow; templateBuild?: string; nodeId?: string; id?: string; warm?: boolean } = {},
): SandboxRow {
  // A warm pool's sandbox was started under the id drawn for it (its hostname is that id).
  const id = from.id ?? newId('sbx');
  const now = Date.now();
  const bootstrap = from.derived?.bootstrap ?? from.parent?.bootstrap ?? null;
  return {
    id,
    owner_id: p.ownerId,
    runtime_id: id.replace('_', '-'),
    status: 'starting',
    name: input.name ?? null,
    template: from.derived?.base_template ?? from.parent?.template ?? input.template,
    template_build: from.derived?.base_build ?? from.parent?.template_build ?? from.templateBuild ?? '',
    derived_template_id: from.derived?.id ?? from.parent?.derived_template_id ?? null,
    template_key: from.derived?.key ?? null,
    template_hash: from.derived?.hash ?? null,
    parent_id: from.parent?.id ?? null,
    metadata: JSON.stringify(input.metadata ?? {}),
    env_sealed: seal(input.env ?? {}),
    timeout_seconds: input.timeoutSeconds,
    suspend_on_idle: input.suspendOnIdle ? 1 : 0,
    idle_ttl_seconds: from.parent?.idle_ttl_seconds ?? null,
    hard_ttl_seconds: null,
    expires_at: now + input.timeoutSeconds * 1000,
    remaining_ms: null,
    hard_expires_at: null,
    bootstrap,
    exposed_ports: '[]',
    network_policy: from.parent?.network_policy ?? '{}',
    kernel_exec_id: null,
    error: null,
    cpus: input.limits?.cpus ?? 1,
    memory_mb: input.limits?.memoryMb ?? 1024,
    disk_mb: input.limits?.diskMb ?? from.parent?.disk_mb ?? null,
    events: JSON.stringify([{ at: new Date(now).toISOString(), event: 'created', ...(from.warm ? { warmPool: true } : {}) }]),
    started_at: now,
    suspended_at: null,
    suspend_keeps_memory: (input.suspendKeepsMemory ?? from.parent?.suspend_keeps_memory === 1) ? 1 : 0,
    memory_kept: 0,
    created_at: now,
    // A fork lives where its parent's layers are.
    node_id: from.parent?.node_id ?? from.nodeId ?? null,
    key_id: capKeyId(p),
    cpu_counted_usec: 0,
    // A fork stays in its parent's workspace.
    workspace_id: from.parent?.workspace_id ?? input.workspaceId ?? DEFAULT_WORKSPACE,
  };
}
