import type { Metrics } from '../../platform/metrics.js';
import type { SandboxesRepo } from './repo.js';
import { SandboxStatus } from './schemas.js';
import type { WarmPool } from './warm-pool.js';

/** nube_sandboxes{status}: every status of the API is reported, zero included. */
export function registerSandboxMetrics(metrics: Metrics, repo: SandboxesRepo, pool: WarmPool): void {
  metrics.sampled('nube_sandboxes', 'Sandboxes of all owners by status', ['status'], async () => {
    const counts = await repo.countByStatus();
    const statuses = new Set<string>([...SandboxStatus.options, ...counts.keys()]);
    return [...statuses].map((status) => ({ labels: { status }, value: counts.get(status) ?? 0 }));
  });
  // The warm pool per source (`template:<name>` or `snapshot:<id>` of a derived template).
  const poolSeries = (field: 'ready' | 'target' | 'hits' | 'misses') => async () =>
    (await pool.status()).keys.map((k) => ({ labels: { source: k.key }, value: k[field] }));
  metrics.sampled('nube_sandbox_pool_ready', 'Warm pool: sandboxes started and waiting to be handed out', ['source'], poolSeries('ready'));
  metrics.sampled('nube_sandbox_pool_target', 'Warm pool: sandboxes it aims to hold (follows the creation rate)', ['source'], poolSeries('target'));
  metrics.sampled('nube_sandbox_pool_hits', 'Warm pool: creations answered from the pool since start', ['source'], poolSeries('hits'));
  metrics.sampled('nube_sandbox_pool_misses', 'Warm pool: creations that found the pool empty since start', ['source'], poolSeries('misses'));
  metrics.sampled('nube_sandbox_pool_memory_cap', 'Warm pool: pooled sandboxes the available memory allows now', [], async () => [
    { value: (await pool.status()).memoryCap },
  ]);
}
