import { Nube } from '../../packages/sdk/src/index.js';
import type { TestNube } from '../helpers/server.js';

/** Plain HTTP against a test nube with one owner's key (the SDK is used where types help). */
export function caller(t: TestNube) {
  return (method: string, path: string, body?: unknown, key?: string) =>
    fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key ?? t.ownerKey}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
}

export function sdk(t: TestNube, key?: string): Nube {
  return new Nube({ apiKey: key ?? t.ownerKey, baseUrl: t.baseUrl });
}
