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
 * sentry and gofer): the memory cap of the warm pool divides by it. bench/sandboxes measures it.
 */
export const IDLE_SANDBOX_MB: Record<string, number> = { namespaces: 6, gvisor: 48 };
