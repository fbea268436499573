import type { AreaModule } from '../area.js';
import { databasesOperations } from './operations.js';

export const databasesArea: AreaModule = {
  name: 'databases',
  operations: databasesOperations,
};
