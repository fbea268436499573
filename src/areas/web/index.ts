import type { AreaModule } from '../area.js';
import { webOperations } from './operations.js';

export const webArea: AreaModule = {
  name: 'web',
  operations: webOperations,
};
