import type { AreaModule } from '../area.js';
import { webhooksOperations } from './operations.js';

export const webhooksArea: AreaModule = {
  name: 'webhooks',
  operations: webhooksOperations,
};
