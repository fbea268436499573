import type { AreaModule } from '../area.js';
import { imagesOperations } from './operations.js';

export const imagesArea: AreaModule = {
  name: 'images',
  operations: imagesOperations,
};
