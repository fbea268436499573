import { describe, expect, it } from 'vitest';
import { buildOperationsModule, inputStyle, type OpEntry } from '../scripts/operations-module.js';
import { toRawInput } from '../src/namespaces.js';
import type { OpTableEntry } from '../src/request.js';

const base: OpEntry = {
  id: 'x.get',
  method: 'GET',
  path: '/api/v2/x',
  pathParams: [],
  query: [],
  requiredQuery: false,
  body: 'none',
  bodyFields: null,
  success: 200,
  contentType: 'application/json',
  implemented: true,
  alias: false,
};

describe('operation shapes the registry will grow into', () => {
  it('picks the input style from query/body shape', () => {
    expect(inputStyle(base)).toBe('none');
    expect(inputStyle({ ...base, query: ['q'] })).toBe('query');
    expect(inputStyle({ ...base, body: 'required' })).toBe('body');
    expect(inputStyle({ ...base, query: ['restart'], body: 'required', bodyFields: ['name'] })).toBe('merged');
    // a record body (secrets map) or a clash keeps body and query apart
    expect(inputStyle({ ...base, query: ['restart'], body: 'required', bodyFields: null })).toBe('split');
    expect(inputStyle({ ...base, query: ['name'], body: 'required', bodyFields: ['name'] })).toBe('split');
  });

  it('nests ids, camel-cases hyphens, lets a method also be a namespace, and skips aliases', () => {
    const text = buildOperationsModule([
      { ...base, id: 'sandboxes.bg', pathParams: ['id'], path: '/api/v2/sandboxes/{id}/bg' },
      { ...base, id: 'sandboxes.bg.kill', method: 'DELETE', pathParams: ['id', 'execId'] },
      { ...base, id: 'share-tokens.create', method: 'POST', body: 'required' },
      { ...base, id: 'machines.secrets.set.put', method: 'PUT', alias: true },
    ]);
    expect(text).toContain('shareTokens: {');
    expect(text).toMatch(/bg: \{\n\s+\(id: .*\): Promise<OpOutput<'sandboxes\.bg'>>;\n\s+kill\(id: .*, execId: /);
    expect(text).toContain("'machines.secrets.set.put': {");
    expect(text).not.toMatch(/^\s+put\(/m);
  });

  it('splits flattened arguments into params, query and body', () => {
    const entry: OpTableEntry = {
      method: 'POST',
      path: '/api/v2/machines/{id}/secrets',
      pathParams: ['id'],
      query: ['restart'],
      body: 'required',
      style: 'merged',
      success: 200,
      contentType: 'application/json',
      implemented: true,
      ns: ['machines', 'secrets', 'set'],
    };
    const opts = { timeoutMs: 5 };
    expect(toRawInput(entry, ['m1', { name: 'a', restart: false }, opts])).toEqual({
      input: { params: { id: 'm1' }, query: { restart: false }, body: { name: 'a' } },
      options: opts,
    });
    expect(toRawInput({ ...entry, style: 'split' }, ['m1', { body: { A: '1' }, query: { restart: true } }])).toEqual({
      input: { params: { id: 'm1' }, query: { restart: true }, body: { A: '1' } },
      options: undefined,
    });
    expect(toRawInput({ ...entry, style: 'none', query: [], body: 'none' }, ['m1', opts]).options).toBe(opts);
  });
});
