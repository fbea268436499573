import type { AreaModule } from '../area.js';
import { imagesOperations } from './operations.js';
import { ImagesService } from './service.js';

export const imagesArea: AreaModule = {
  name: 'images',
  operations: imagesOperations,
  create(_deps, other) {
    if (!other.files) throw new Error('the images area needs the files service to be created first');
    return { images: new ImagesService(other.files) };
  },
};
