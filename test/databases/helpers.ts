import { Nube } from '../../packages/sdk/src/index.js';
import type { TestNube } from '../helpers/server.js';

export { caller } from '../helpers/server.js';

export function sdk(t: TestNube, key?: string): Nube {
  return new Nube({ apiKey: key ?? t.ownerKey, baseUrl: t.baseUrl });
}
