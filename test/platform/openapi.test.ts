import SwaggerParser from '@apidevtools/swagger-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { operations } from '../../src/areas/index.js';
import { toolName } from '../../src/platform/operation.js';
import { json, startNube, type TestNube } from '../helpers/server.js';

let t: TestNube;
beforeAll(async () => {
  t = await startNube();
});
afterAll(() => t.close());

describe('documents derived from the registry', () => {
  it('serves an OpenAPI 3.1 document a real validator accepts, with every operation', async () => {
    const r = await fetch(`${t.baseUrl}/api/v2/openapi.json`);
    expect(r.status).toBe(200);
    const doc = await json(r);
    expect(doc.openapi).toBe('3.1.0');
    await SwaggerParser.validate(structuredClone(doc));
    const ids = Object.values(doc.paths as Record<string, Record<string, { operationId: string }>>).flatMap((p) =>
      Object.values(p).map((o) => o.operationId),
    );
    for (const op of operations) expect(ids).toContain(op.id);
  });

  it('serves the public tool catalogue without a credential', async () => {
    const r = await fetch(`${t.baseUrl}/api/tools.json`);
    expect(r.status).toBe(200);
    const cat = await json(r);
    expect(cat.count).toBe(operations.length);
    expect(cat.tools.map((x: { name: string }) => x.name)).toEqual(operations.map(toolName));
    for (const tool of cat.tools) {
      expect(tool.inputSchema.type).toBe('object');
      expect(typeof tool.description).toBe('string');
    }
  });

  it('answers 501 NotImplemented for operations without a handler', async () => {
    const pending = operations.filter((o) => !o.handler);
    for (const op of pending.slice(0, 20)) {
      const url = `${t.baseUrl}/api/v2${op.path.replace(/\{[^}]+\}/g, 'x1')}`;
      const r = await fetch(url, { method: op.method, headers: t.auth });
      const body = await json(r);
      // An operation that does not take the owner's key refuses it before anything else.
      if (!op.auth.includes('owner')) {
        expect(r.status).toBe(403);
        expect(body.code).toBe('CredentialNotAllowed');
        continue;
      }
      // Either validation (400) rejects the placeholder input first, or the operation says 501.
      expect([400, 501]).toContain(r.status);
      if (r.status === 501) expect(body.code).toBe('NotImplemented');
    }
  });
});
