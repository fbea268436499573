import type { AreaModule } from '../area.js';
import { datasetsOperations } from './operations.js';
import { DatasetsRepo, datasetsMigrations } from './repo.js';
import { DatasetsService } from './service.js';

export const datasetsArea: AreaModule = {
  name: 'datasets',
  operations: datasetsOperations,
  migrations: datasetsMigrations,
  create(deps, other) {
    const { databases, account } = other;
    if (!databases || !account)
      throw new Error('the datasets area needs the databases and account services to be created first');
    const datasets = new DatasetsService(
      new DatasetsRepo(deps.store.db),
      () => databases,
      (ownerId) => account.planOf(ownerId),
    );
    return { datasets };
  },
};
