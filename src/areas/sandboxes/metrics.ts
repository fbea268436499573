import type { Metrics } from '../../platform/metrics.js';
import type { SandboxesRepo } from './repo.js';
import { SandboxStatus } from './schemas.js';

/** nube_sandboxes{status}: every status of the API is reported, zero included. */
export function registerSandboxMetrics(metrics: Metrics, repo: SandboxesRepo): void {
  metrics.sampled('nube_sandboxes', 'Sandboxes of all owners by status', ['status'], async () => {
    const counts = await repo.countByStatus();
    const statuses = new Set<string>([...SandboxStatus.options, ...counts.keys()]);
    return [...statuses].map((status) => ({ labels: { status }, value: counts.get(status) ?? 0 }));
  });
}
