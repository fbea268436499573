import type { AreaModule } from '../area.js';
import { agentsOperations } from './operations.js';

export const agentsArea: AreaModule = {
  name: 'agents',
  operations: agentsOperations,
};
