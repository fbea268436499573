import { type Kysely, type Migration, Migrator } from 'kysely';
import type { Tables } from './schema.js';

/**
 * Runs every migration (platform's and areas') in name order. Names start with a sortable stamp and
 * the owning area, e.g. `0001-platform-accounts`, so areas add migrations without a central list.
 * A migration touches only its own area's tables, so order matters within an area, not across them:
 * one that sorts before migrations a store already ran (a new area's `0010-...` on a store at
 * `0101-sandboxes-...`) still runs, instead of refusing to start an upgraded nube.
 */
export async function migrateToLatest(db: Kysely<Tables>, migrations: Record<string, Migration>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
    migrationTableName: 'nube_migrations',
    migrationLockTableName: 'nube_migrations_lock',
    allowUnorderedMigrations: true,
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new Error(`migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`);
  }
}
