import type { AreaModule } from '../area.js';
import { workspacesOperations } from './operations.js';
import { WorkspacesRepo, workspacesMigrations } from './repo.js';
import { WorkspacesService } from './service.js';

export const workspacesArea: AreaModule = {
  name: 'workspaces',
  operations: workspacesOperations,
  migrations: workspacesMigrations,
  create(deps, other) {
    const account = other.account;
    if (!account) throw new Error('the workspaces area needs the account service to be created first');
    const workspaces = new WorkspacesService(new WorkspacesRepo(deps.store.db), deps.workspaces, deps.events, async (p) => {
      const a = account.getAccount(p);
      return (a instanceof Promise ? await a : a).createdAt;
    });
    return { workspaces };
  },
};
