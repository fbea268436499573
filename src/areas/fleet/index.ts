import type { AreaModule } from '../area.js';
import { fleetOperations } from './operations.js';

export const fleetArea: AreaModule = {
  name: 'fleet',
  operations: fleetOperations,
};
