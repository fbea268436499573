import type { Config } from '../../platform/config-shape.js';
import type { Metrics } from '../../platform/metrics.js';
import type { SandboxesRepo } from './repo.js';
import { SandboxStatus } from './schemas.js';
import { type StoreUsage, storeUsage } from './store-usage.js';
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

/**
 * The sandbox store against the host's disk (store-usage.ts): what the image may take and takes, the
 * host's free space and reserve, and 1 in nube_sandbox_store_near_reserve when the host's free space
 * nears the reserve (or is inside it): the alert to set. One read per scrape, shared.
 */
export function registerStoreMetrics(metrics: Metrics, config: Config): void {
  let last: { at: number; usage: Promise<StoreUsage> } | null = null;
  const read = () => {
    if (!last || Date.now() - last.at > 1000) last = { at: Date.now(), usage: storeUsage(config) };
    return last.usage;
  };
  const gauge = (name: string, help: string, value: (u: StoreUsage) => number) =>
    metrics.sampled(name, help, [], async () => [{ value: value(await read()) }]);
  gauge('nube_sandbox_store_size_bytes', 'Sandbox store image: its size, how far it may grow (0 without an image)', (u) => u.sizeBytes);
  gauge('nube_sandbox_store_allocated_bytes', 'Sandbox store image: what it takes on the host now', (u) => u.allocatedBytes);
  gauge('nube_host_free_bytes', "Free space of the filesystem holding nube's data dir", (u) => u.hostFreeBytes);
  gauge('nube_sandbox_store_reserve_bytes', 'Free space the host keeps (NUBE_STORE_RESERVE_GB)', (u) => u.reserveBytes);
  gauge('nube_sandbox_store_headroom_bytes', 'Host free space beyond the reserve; negative inside it', (u) => u.headroomBytes);
  gauge('nube_sandbox_store_overcommit_bytes', 'What the store may still take beyond the host\'s free space less the reserve', (u) => u.overcommitBytes);
  gauge('nube_sandbox_store_near_reserve', '1 when the host\'s free space is within half a reserve of the reserve, or inside it', (u) => (u.nearReserve ? 1 : 0));
  gauge('nube_sandbox_store_disk_limits', "1 when each sandbox's disk is limited on the store (XFS project quotas or btrfs qgroups)", (u) =>
    u.status?.quota && u.mounted ? 1 : 0,
  );
}
