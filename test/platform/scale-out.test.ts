import { TEST_REDIS_URL } from '../helpers/redis.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTempDatabase } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';

// Two replicas on one PostgreSQL and one Redis behave as one deployment.
describe('two replicas on PostgreSQL + Redis', () => {
  let pg: { url: string; drop: () => Promise<void> };
  let a: TestNube;
  let b: TestNube;
  beforeAll(async () => {
    pg = await createTempDatabase('scale');
    const env = { DATABASE_URL: pg.url, REDIS_URL: TEST_REDIS_URL, NUBE_RATE_LIMIT_PER_MINUTE: '4', NUBE_SECRET: 's'.repeat(40) };
    a = await startNube({ env });
    b = await startNube({ env: { ...env, NUBE_OWNER_KEY: a.ownerKey } });
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await pg?.drop();
  });

  it('share accounts, keys and rate limits', async () => {
    const created = await fetch(`${a.baseUrl}/api/v2/account/keys`, {
      method: 'POST',
      headers: { ...a.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'replica' }),
    });
    expect(created.status).toBe(201);
    const { secret } = await json(created);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const base = i % 2 ? b.baseUrl : a.baseUrl;
      statuses.push((await fetch(`${base}/api/v2/account`, { headers: { authorization: `Bearer ${secret}` } })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
  });
});
