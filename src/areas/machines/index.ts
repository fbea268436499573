import type { AreaModule } from '../area.js';
import { machinesOperations } from './operations.js';

export const machinesArea: AreaModule = {
  name: 'machines',
  operations: machinesOperations,
};
