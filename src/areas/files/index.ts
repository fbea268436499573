import type { AreaModule } from '../area.js';
import { filesOperations } from './operations.js';

export const filesArea: AreaModule = {
  name: 'files',
  operations: filesOperations,
};
