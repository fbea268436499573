// Every migration nube runs (the platform's and each area's): one list for the server, `nube migrate`
// and `nube doctor`, so none of them misses a table.
import type { Migration } from 'kysely';
import { areaMigrations } from './areas/index.js';
import { jobsMigrations } from './platform/jobs.js';
import { nodesMigrations } from './platform/nodes-migration.js';
import { outboxMigrations } from './platform/outbox.js';
import { usageMigrations } from './platform/usage.js';

export const ALL_MIGRATIONS: Record<string, Migration> = {
  ...jobsMigrations,
  ...usageMigrations,
  ...outboxMigrations,
  ...nodesMigrations,
  ...areaMigrations,
};
