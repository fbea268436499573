import type { AreaModule } from '../area.js';
import { accountOperations } from './operations.js';
import { scopeOperations } from './scope-operations.js';
import { AiKeys, aiKeyMigrations } from './ai-key.js';
import { AccountRepo, accountMigrations, keyScopeMigrations } from './repo.js';
import { AccountService } from './service.js';

export const accountArea: AreaModule = {
  name: 'account',
  operations: [...accountOperations, ...scopeOperations],
  migrations: { ...accountMigrations, ...aiKeyMigrations, ...keyScopeMigrations },
  create(deps) {
    const account = new AccountService(
      new AccountRepo(deps.store.db, deps.store.dialect),
      deps.usage,
      deps.config.authCacheMs,
      new AiKeys(deps.store.db, deps.secretBox),
      deps.config.outboundAllow,
      deps.workspaces,
    );
    deps.auth.register(account.ownerKeyResolver);
    return { account };
  },
};
