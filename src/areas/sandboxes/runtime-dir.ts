import { join } from 'node:path';
import type { Config } from '../../platform/config-shape.js';

/** The configured driver's own data dir: each driver keeps its own state (templates are shared). */
export function runtimeDataDir(config: Config): string {
  return join(config.dataDir, config.sandboxes.driver === 'gvisor' ? 'sandbox-runtime-gvisor' : 'sandbox-runtime');
}

/** Where a running nube's warm pool writes its state, for `nube doctor`. */
export function poolStatusFile(config: Config): string {
  return join(runtimeDataDir(config), 'pool.json');
}

/**
 * What one idle sandbox costs the host, in MB, per driver (init, network, cgroup, overlay; the gVisor
 * sentry and gofer): the memory cap of the warm pool divides by it. bench/sandboxes measured 4.5 MB
 * of MemAvailable per idle namespaces sandbox under load (0.7 MB in its own cgroup); gVisor's is an
 * estimate (its sentry and gofer), not measured yet.
 */
export const IDLE_SANDBOX_MB: Record<string, number> = { namespaces: 6, gvisor: 48 };
