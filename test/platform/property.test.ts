import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operations } from '../../src/areas/index.js';
import { fillPath } from '../../src/platform/operation.js';
import { API_PREFIX } from '../../src/platform/rest.js';
import { startNube, type TestNube } from '../helpers/server.js';

// Random and malformed input to every operation of the registry never produces an unexpected 5xx:
// operations without a handler may answer 501, nothing may answer 500.

let t: TestNube;
beforeAll(async () => {
  t = await startNube({ listen: false, env: { NUBE_RATE_LIMIT_PER_MINUTE: '1000000' } });
});
afterAll(() => t.close());

const jsonValue = fc.jsonValue({ maxDepth: 3 });
const segment = fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom('..', '%2e%2e', 'x'.repeat(300), '0', '-1', 'null'));

function allowed(status: number, implemented: boolean): boolean {
  return status < 500 || (!implemented && status === 501);
}

describe('no 5xx on random input', () => {
  it('every operation, random params, query and JSON bodies', async () => {
    const cheap = operations.filter((op) => !/^sandboxes\.|^machines\.|^agents\.|^fleet\./.test(op.id) || op.method === 'GET');
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...cheap),
        fc.dictionary(fc.string({ maxLength: 10 }), fc.oneof(fc.string({ maxLength: 20 }), fc.integer().map(String)), { maxKeys: 4 }),
        segment,
        fc.oneof(jsonValue, fc.dictionary(fc.string({ maxLength: 12 }), jsonValue, { maxKeys: 6 })),
        async (op, query, seg, body) => {
          const params = Object.fromEntries(Object.keys(op.params?.shape ?? {}).map((k) => [k, seg]));
          const qs = new URLSearchParams(query).toString();
          const res = await t.nube.app.inject({
            method: op.method,
            url: API_PREFIX + fillPath(op.path, params) + (qs ? `?${qs}` : ''),
            headers: { ...t.auth, 'content-type': 'application/json' },
            payload: op.method === 'GET' || op.method === 'DELETE' ? undefined : JSON.stringify(body),
          });
          if (!allowed(res.statusCode, Boolean(op.handler))) {
            throw new Error(`${op.id} answered ${res.statusCode}: ${res.body}`);
          }
          const parsed = JSON.parse(res.body);
          if (res.statusCode >= 400) expect(typeof parsed.error).toBe('string');
        },
      ),
      { numRuns: 400 },
    );
  }, 120_000);

  it('malformed JSON bodies are a 400 on every operation that takes a body', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...operations.filter((o) => o.body)),
        fc.string({ minLength: 1, maxLength: 40 }).filter((s) => {
          try {
            JSON.parse(s);
            return false;
          } catch {
            return s.trim() !== '';
          }
        }),
        async (op, raw) => {
          const params = Object.fromEntries(Object.keys(op.params?.shape ?? {}).map((k) => [k, 'x1']));
          const res = await t.nube.app.inject({
            method: op.method,
            url: API_PREFIX + fillPath(op.path, params),
            headers: { ...t.auth, 'content-type': 'application/json' },
            payload: raw,
          });
          expect(res.statusCode).toBe(400);
          expect(JSON.parse(res.body).code).toBe('InvalidJson');
        },
      ),
      { numRuns: 200 },
    );
  });
});
