import type { Metrics } from '../../platform/metrics.js';
import type { EmbeddedDatabaseEngine } from './engine/index.js';

/** The executor pool of this process (each replica has its own). */
export function registerDatabaseMetrics(metrics: Metrics, engine: EmbeddedDatabaseEngine): void {
  metrics.sampled('nube_database_executors', 'Executor processes running user database queries', [], () => [
    { value: engine.poolStats.executors },
  ]);
  metrics.sampled('nube_database_executors_busy', 'Executor processes running a request now', [], () => [{ value: engine.poolStats.busy }]);
  metrics.sampled('nube_database_requests_queued', 'Database requests waiting for an executor', [], () => [
    { value: engine.poolStats.queued },
  ]);
}
