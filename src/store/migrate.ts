import { type Kysely, type Migration, Migrator, sql } from 'kysely';
import type { Tables } from './schema.js';

const TABLE = 'nube_migrations';

function migrator(db: Kysely<Tables>, migrations: Record<string, Migration>): Migrator {
  return new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
    migrationTableName: TABLE,
    migrationLockTableName: 'nube_migrations_lock',
    allowUnorderedMigrations: true,
  });
}

export interface MigrationPlan {
  /** Migrations this nube has and the store has not run, in the order they would run. */
  pending: string[];
  /** Migrations the store ran that this nube does not know: a newer nube used it. */
  unknown: string[];
}

/** What `migrateToLatest` would do, without doing it (`nube migrate --dry-run`). */
export async function migrationPlan(db: Kysely<Tables>, migrations: Record<string, Migration>): Promise<MigrationPlan> {
  const infos = await migrator(db, migrations).getMigrations();
  const ran = await sql<{ name: string }>`select name from ${sql.table(TABLE)}`
    .execute(db)
    .then((r) => r.rows.map((x) => x.name))
    .catch(() => [] as string[]); // a new store has no table yet
  return {
    pending: infos.filter((i) => i.executedAt === undefined).map((i) => i.name),
    unknown: ran.filter((n) => !(n in migrations)).sort(),
  };
}

/** Refusal to run on a store a newer nube migrated: its schema is not one this code knows. */
export class NewerStoreError extends Error {
  constructor(readonly unknown: string[]) {
    super(
      `this metadata store was migrated by a newer nube (${unknown.length} migration(s) this version does not have: ` +
        `${unknown.slice(0, 5).join(', ')}${unknown.length > 5 ? ', ...' : ''}); run that version, or restore a backup taken before the upgrade`,
    );
  }
}

/**
 * Runs every migration (platform's and areas') in name order. Names start with a sortable stamp and
 * the owning area, e.g. `0001-platform-accounts`, so areas add migrations without a central list.
 * A migration touches only its own area's tables, so order matters within an area, not across them:
 * one that sorts before migrations a store already ran (a new area's `0010-...` on a store at
 * `0101-sandboxes-...`) still runs, instead of refusing to start an upgraded nube.
 */
export async function migrateToLatest(db: Kysely<Tables>, migrations: Record<string, Migration>): Promise<void> {
  const { unknown } = await migrationPlan(db, migrations);
  if (unknown.length) throw new NewerStoreError(unknown);
  const { error, results } = await migrator(db, migrations).migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new Error(`migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`);
  }
}
