import type { AreaModule } from '../area.js';
import { shareTokensOperations } from './operations.js';

export const share_tokensArea: AreaModule = {
  name: 'share-tokens',
  operations: shareTokensOperations,
};
