import type { Migration } from 'kysely';
import type { BackupPart } from '../platform/backup/parts.js';
import type { Config } from '../platform/config-shape.js';
import type { DoctorCheck } from '../platform/doctor.js';
import type { AnyOperation, Services } from '../platform/operation.js';
import type { PlatformDeps } from './deps.js';

/**
 * What an area contributes: its operations, its tables' migrations, and a factory that builds its
 * service from the platform's dependencies (registering credential resolvers, usage gauges, job
 * handlers and bus subscribers as it needs). `other` gives access to services created before it.
 */
export interface AreaModule {
  name: string;
  operations: AnyOperation[];
  migrations?: Record<string, Migration>;
  create?(deps: PlatformDeps, other: Partial<Services>): Promise<Partial<Services>> | Partial<Services>;
  /** Extra HTTP routes outside the registry (presigned blob URLs, sandbox port proxy). */
  routes?(app: import('fastify').FastifyInstance, services: Services, deps: PlatformDeps): void;
  /** Checks `nube doctor` runs for this area: host parts it needs, services it is configured to reach. */
  doctor?(config: Config): DoctorCheck[];
  /**
   * The directories this area owns on disk that `nube backup` copies and `nube restore` puts back
   * (its tables travel with the metadata store). Rebuildable bytes (template root filesystems, caches)
   * are left out.
   */
  backup?(config: Config): BackupPart[];
  /** Called on shutdown, before the store closes. */
  close?(services: Services): Promise<void>;
}
