import type { AreaModule } from '../area.js';
import { accountOperations } from './operations.js';
import { AccountRepo, accountMigrations } from './repo.js';
import { AccountService } from './service.js';

export const accountArea: AreaModule = {
  name: 'account',
  operations: accountOperations,
  migrations: accountMigrations,
  create(deps) {
    const account = new AccountService(new AccountRepo(deps.store.db), deps.usage, deps.config.authCacheMs);
    deps.auth.register(account.ownerKeyResolver);
    return { account };
  },
};
