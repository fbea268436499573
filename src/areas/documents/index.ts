import type { AreaModule } from '../area.js';
import { documentsOperations } from './operations.js';

export const documentsArea: AreaModule = {
  name: 'documents',
  operations: documentsOperations,
};
