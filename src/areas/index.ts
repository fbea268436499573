import type { Migration } from 'kysely';
import type { AnyOperation, Services } from '../platform/operation.js';
import { accountOperations } from './account/operations.js';
import { accountMigrations } from './account/repo.js';
import { AccountRepo } from './account/repo.js';
import { AccountService } from './account/service.js';
import type { PlatformDeps } from './deps.js';

/** Every operation of the API, in catalogue order. The one list REST, OpenAPI, MCP and the SDK derive from. */
export const operations: AnyOperation[] = [...accountOperations];

/** Every area's migrations; names sort globally. */
export const areaMigrations: Record<string, Migration> = { ...accountMigrations };

/** Builds each area's service and registers its credential resolvers, usage gauges and job handlers. */
export async function createServices(deps: PlatformDeps): Promise<Services> {
  const account = new AccountService(new AccountRepo(deps.store.db), deps.usage, deps.config.authCacheMs);
  deps.auth.register(account.ownerKeyResolver);
  return { account };
}
