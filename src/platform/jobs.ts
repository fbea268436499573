// Durable jobs and timers in the metadata store (ARCHITECTURE.md, "jobs and timers"): one table,
// polled; a worker leases due jobs, runs them, and records done / retry-with-backoff / dead.
//
// Delivery is AT LEAST ONCE. A worker can die after its handler's side effects and before it records
// `done`, and then the job runs again once the lease expires. Handlers must therefore be idempotent
// (check before acting, use upserts, pass the job id as an idempotency key to outside services).
import type { JobQueue, JobQueueOptions } from './jobs-contract.js';
import { SqlJobQueue } from './jobs-queue.js';

export { jobsMigrations } from './jobs-migration.js';
export type { JobStatus } from './jobs-migration.js';
export type {
  EnqueueOptions,
  HandlerOptions,
  JobContext,
  JobHandler,
  JobInfo,
  JobLogger,
  JobQueue,
  JobQueueOptions,
  JobRef,
} from './jobs-contract.js';
export { cutShort } from './jobs-contract.js';
export { defaultBackoff, PermanentJobError } from './jobs-retry.js';

export function createJobQueue(opts: JobQueueOptions): JobQueue {
  return new SqlJobQueue(opts);
}
