import { type Kysely, type Migration, Migrator } from 'kysely';
import type { Tables } from './schema.js';

/**
 * Runs every migration (platform's and areas') in name order. Names start with a sortable stamp and
 * the owning area, e.g. `0001-platform-accounts`, so areas add migrations without a central list.
 */
export async function migrateToLatest(db: Kysely<Tables>, migrations: Record<string, Migration>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
    migrationTableName: 'nube_migrations',
    migrationLockTableName: 'nube_migrations_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new Error(`migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`);
  }
}
