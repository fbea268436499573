import type { AreaModule } from '../area.js';
import { sandboxesOperations } from './operations.js';

export const sandboxesArea: AreaModule = {
  name: 'sandboxes',
  operations: sandboxesOperations,
};
